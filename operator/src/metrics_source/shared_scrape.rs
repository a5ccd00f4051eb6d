//! One scrape of a target shared by every reader within a moment. Each sampler round asks
//! for the gateway's `/metrics` once per model (each model's readings are its `model_name`
//! series of the same text), and the queue watch asks again within the same second: without
//! sharing, a gateway serving N models is fetched and parsed N + 1 times a second. A fetch
//! started less than [`FRESH_FOR`] ago is shared (readers that come while it runs await it
//! together) with its parsed exposition.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared};

use super::scrape::{ScrapeError, fetch_text};
use super::text_format::{Exposition, parse};

/// How long a fetch serves later readers: well under the sampler's second, so a sample is
/// never a previous round's, and the queue watch still sees a queue within its second.
pub const FRESH_FOR: Duration = Duration::from_millis(250);

/// A parsed `/metrics`, or why it could not be read.
pub type Scraped = Result<Arc<Exposition>, ScrapeError>;

type Fetch = Shared<BoxFuture<'static, Scraped>>;

/// Recent fetches by URL.
#[derive(Default)]
pub struct SharedScrapes {
    recent: Mutex<HashMap<String, (Instant, Fetch)>>,
}

impl SharedScrapes {
    /// `url`'s exposition: from a fetch started within [`FRESH_FOR`], or a new one.
    pub async fn get(&self, url: &str) -> Scraped {
        let fetch = {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            // Expired entries go as new ones come: the map holds the last moment's targets.
            recent.retain(|_, (started, _)| now.duration_since(*started) < FRESH_FOR);
            let (_, fetch) = recent
                .entry(url.to_string())
                .or_insert_with(|| (now, fetch_parsed(url.to_string()).boxed().shared()));
            fetch.clone()
        };
        fetch.await
    }
}

async fn fetch_parsed(url: String) -> Scraped {
    let text = fetch_text(&url).await?;
    Ok(Arc::new(parse(&text)))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A `/metrics` endpoint that counts its requests and answers `up <n>` to the n-th.
    async fn counting_target(hits: Arc<AtomicU32>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let n = hits.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = socket.read(&mut buf).await;
                    // Slow enough that concurrent readers overlap it.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let body = format!("up {n}\n");
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                });
            }
        });
        format!("http://{addr}/metrics")
    }

    fn value(scraped: &Scraped) -> f64 {
        scraped.as_ref().expect("scraped").samples[0].value
    }

    #[tokio::test]
    async fn readers_within_a_moment_share_one_fetch_and_later_ones_fetch_again() {
        let hits = Arc::new(AtomicU32::new(0));
        let url = counting_target(hits.clone()).await;
        let scrapes = SharedScrapes::default();
        let together = futures::future::join_all((0..5).map(|_| scrapes.get(&url))).await;
        assert_eq!(hits.load(Ordering::SeqCst), 1, "five readers, one fetch");
        assert!(together.iter().all(|s| value(s) == 1.0));
        tokio::time::sleep(FRESH_FOR + Duration::from_millis(20)).await;
        let later = scrapes.get(&url).await;
        assert_eq!((hits.load(Ordering::SeqCst), value(&later)), (2, 2.0));
        // A failure is shared too, and forgotten as fast.
        let dead = SharedScrapes::default();
        let refused = dead.get("http://127.0.0.1:1/metrics").await;
        assert!(
            matches!(refused, Err(ScrapeError::Request { .. })),
            "{refused:?}"
        );
    }
}
