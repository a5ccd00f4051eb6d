//! `Parsed`: a request as every layer below the parse layer takes it, its facts typed.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::Request;

use crate::auth::Tenant;
use crate::error::GatewayError;
use crate::routing::{Fallbacks, ModelPool};
use crate::vocab::{Info, RequestInfo};

/// A request read by the parse layer. The layers below it (observe, limits, admission,
/// failover, pick, upstream) are `Service<Parsed>`: what they need is a field, so a stack
/// built without the parse layer does not compile, where request extensions would have
/// failed at run time.
#[derive(Debug)]
pub struct Parsed {
    /// The request's facts, shared with the guards on its response body.
    pub info: Info,
    /// The pool of its model.
    pub pool: Arc<ModelPool>,
    /// Whose request it is.
    pub tenant: Arc<Tenant>,
    /// A Batch API line (sent by the batch runner): not interactive demand.
    pub batch_line: bool,
    /// The models still to try when the client named a route (taken by the fallback layer).
    pub route: Option<Fallbacks>,
    /// Replica URLs this attempt must not go to (the failover layer's earlier tries).
    pub exclude: Vec<String>,
    /// The request as it is forwarded: headers and the buffered body.
    pub http: Request<Bytes>,
}

impl Parsed {
    /// A copy for another attempt (bodies are `Bytes`: cheap to clone).
    pub fn copy(&self) -> Parsed {
        self.copy_with_body(self.http.body().clone())
    }

    /// A copy whose body is `body` (and whose `content-length` says its length). Request
    /// extensions are not copied: nothing below the parse layer reads them.
    pub fn copy_with_body(&self, body: Bytes) -> Parsed {
        let mut http = Request::new(body);
        *http.method_mut() = self.http.method().clone();
        *http.uri_mut() = self.http.uri().clone();
        *http.version_mut() = self.http.version();
        *http.headers_mut() = self.http.headers().clone();
        let length = http.body().len();
        http.headers_mut()
            .insert(http::header::CONTENT_LENGTH, length.into());
        Parsed {
            info: self.info.clone(),
            pool: self.pool.clone(),
            tenant: self.tenant.clone(),
            batch_line: self.batch_line,
            route: None,
            exclude: self.exclude.clone(),
            http,
        }
    }

    /// This request sent to `pool`'s model instead (a route's next model): its `model`
    /// member names that model (the engine serves it under that name), and its facts are
    /// that model's (its name on metrics and limits, its affinity hash), waiting for
    /// capacity until `deadline`.
    pub fn retarget(
        &self,
        pool: Arc<ModelPool>,
        deadline: Instant,
    ) -> Result<Parsed, GatewayError> {
        let mut info = RequestInfo::clone(&self.info);
        info.deadline = deadline;
        let mut copy = if pool.name == self.info.model {
            self.copy()
        } else {
            let body = super::with_model(self.http.body(), &pool.name);
            let chars = pool.settings.affinity_prefix_chars;
            if chars != self.pool.settings.affinity_prefix_chars {
                info.prefix_hash = super::parse_body(&body)?
                    .summarize_prompt(chars)?
                    .prefix_hash;
            }
            info.model = pool.name.clone();
            self.copy_with_body(body)
        };
        copy.info = Arc::new(info);
        copy.pool = pool;
        Ok(copy)
    }
}
