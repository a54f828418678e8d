//! Tool-name globs: `*` matches any run of characters, `?` exactly one; everything else is literal.

/// Whether `name` matches `pattern` as a whole.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with backtracking to the last `*`: linear in practice, no recursion.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
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
        ] {
            assert_eq!(glob_match(pattern, name), expected, "{pattern} vs {name}");
        }
    }
}
