//! Whole-name globs (`*` any run of characters, `?` one): tenants' model lists, and which
//! namespaces may claim which served names.

/// Whether `text` matches `pattern` as a whole. Iterative with one backtrack point (the last
/// `*`), so it runs in O(pattern × text) at worst and never recurses.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                // Let the last `*` take one more character and retry from there.
                Some((star_pi, star_ti)) => {
                    pi = star_pi + 1;
                    ti = star_ti + 1;
                    star = Some((star_pi, star_ti + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        let cases = [
            ("llama", "llama", true),
            ("llama", "llama-3", false),
            ("llama*", "llama-3", true),
            ("llama*", "llama", true),
            ("*", "", true),
            ("meta-llama/*-8B", "meta-llama/Llama-3-8B", true),
            ("meta-llama/*-8B", "meta-llama/Llama-3-70B", false),
            ("?mol*", "smollm2-135m", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYbZ", false),
            ("", "", true),
            ("", "x", false),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(glob_match(pattern, text), expected, "{pattern} ~ {text}");
        }
    }
}
