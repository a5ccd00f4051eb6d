//! Where two JSON values differ, as paths: used to find the fields a typed round trip drops.

use serde_json::Value;

/// JSON paths (`spec.template.spec.containers[0].securtyContext`) where `expected` and
/// `actual` differ; empty when they are equal.
pub fn differences(expected: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(expected, actual, "", &mut out);
    out
}

fn walk(expected: &Value, actual: &Value, path: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match b.get(key) {
                    Some(other) => walk(value, other, &here, out),
                    None => out.push(here),
                }
            }
            for key in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(if path.is_empty() {
                    format!("+{key}")
                } else {
                    format!("{path}.+{key}")
                });
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                walk(x, y, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a == b => {}
        _ => out.push(if path.is_empty() {
            "(root)".into()
        } else {
            path.to_string()
        }),
    }
}

/// `value` without `null` members: the API server treats a null field as an absent one, and
/// typed structs drop them on the way back.
pub fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_values_have_no_differences() {
        let v = json!({"a": [1, {"b": "c"}], "d": 2.0});
        assert!(differences(&v, &json!({"a": [1, {"b": "c"}], "d": 2})).is_empty());
    }

    #[test]
    fn missing_extra_and_changed_fields_are_named_by_path() {
        let expected =
            json!({"spec": {"containers": [{"name": "a", "securtyContext": {}}]}, "x": 1});
        let actual = json!({"spec": {"containers": [{"name": "b"}]}, "x": 1, "y": 2});
        assert_eq!(
            differences(&expected, &actual),
            [
                "spec.containers[0].name",
                "spec.containers[0].securtyContext",
                "+y"
            ]
        );
    }

    #[test]
    fn nulls_are_dropped_at_every_depth() {
        let v = json!({"a": null, "b": [{"c": null, "d": 1}]});
        assert_eq!(without_nulls(&v), json!({"b": [{"d": 1}]}));
    }
}
