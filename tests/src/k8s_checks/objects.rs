//! A multi-document YAML stream (what `helm template` prints) as Kubernetes objects.

use serde_json::Value;

use super::ManifestError;

/// One object of a manifest stream, untyped, with its identity read out.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// `apiVersion`, e.g. `apps/v1`.
    pub api_version: String,
    /// `kind`, e.g. `Deployment`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`, when set.
    pub namespace: Option<String>,
    /// The whole object.
    pub value: Value,
}

impl Object {
    /// Reads an object's identity; `index` names the document in errors.
    pub fn from_value(index: usize, value: Value) -> Result<Self, ManifestError> {
        let field = |pointer: &str| {
            value
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let missing = |what: &str| ManifestError::NotAnObject {
            index,
            reason: format!("no {what}"),
        };
        Ok(Object {
            api_version: field("/apiVersion").ok_or_else(|| missing("apiVersion"))?,
            kind: field("/kind").ok_or_else(|| missing("kind"))?,
            name: field("/metadata/name").ok_or_else(|| missing("metadata.name"))?,
            namespace: field("/metadata/namespace"),
            value,
        })
    }

    /// `Kind namespace/name`, how findings name the object.
    pub fn id(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

/// Every non-empty document of `yaml` as an [`Object`].
pub fn parse_documents(yaml: &str) -> Result<Vec<Object>, ManifestError> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml)?;
    documents
        .into_iter()
        .filter(|doc| !doc.is_null())
        .enumerate()
        .map(|(index, doc)| Object::from_value(index, doc))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_document_and_skips_empty_ones() {
        let yaml = "---\n# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  \
                    namespace: ns\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\n";
        let objects = parse_documents(yaml).expect("valid stream");
        let ids: Vec<String> = objects.iter().map(Object::id).collect();
        assert_eq!(ids, ["ConfigMap ns/a", "Namespace b"]);
    }

    #[test]
    fn a_document_without_kind_is_an_error() {
        let err = parse_documents("apiVersion: v1\nmetadata:\n  name: a\n");
        assert!(
            matches!(err, Err(ManifestError::NotAnObject { reason, .. }) if reason == "no kind")
        );
    }
}
