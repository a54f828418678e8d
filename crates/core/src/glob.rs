//! Tool-name globs: `*` matches any run of characters, `?` exactly one; everything else is literal.
//! Hand-written on purpose: globset would compile a regex per pattern to match names, not paths.

/// Whether `name` matches `pattern` as a whole.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    // Tool names and patterns are ASCII in practice: match their bytes without collecting
    // characters (two allocations per match, several matches per call). `?` is one character,
    // so anything else goes through chars.
    if pattern.is_ascii() && name.is_ascii() {
        return match_units(pattern.as_bytes(), name.as_bytes(), b'*', b'?');
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    match_units(&p, &n, '*', '?')
}

/// Iterative matching with backtracking to the last `*`: linear in practice, no recursion.
fn match_units<T: Copy + PartialEq>(p: &[T], n: &[T], star: T, one: T) -> bool {
    let (mut pi, mut ni) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == one || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == star {
            back = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = back {
            pi = sp + 1;
            ni = sn + 1;
            back = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == star)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        for (pattern, name, expected) in [
            ("*", "anything", true),
            ("*", "", true),
            ("scratch_*", "scratch_write", true),
            ("scratch_*", "my_scratch_write", false),
            ("*_read", "scratch_read", true),
            ("s?eep", "sleep", true),
            ("s?eep", "sleeep", false),
            ("echo", "echo", true),
            ("echo", "echoes", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("mcp.*", "mcp.fs.read", true),
            ("wetter_?", "wetter_ü", true),
            ("*ü", "grün_ü", true),
            ("?", "ü", true),
            ("??", "ü", false),
        ] {
            assert_eq!(glob_match(pattern, name), expected, "{pattern} vs {name}");
        }
    }
}
