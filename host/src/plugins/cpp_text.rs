//! Scanning C++ text a plugin hands over (`kernel_header`, `kernel_driver`)
//! without compiling it: its code with comments and literals blanked out,
//! whether its brackets balance, and whether it defines a function.

/// `text` with comments, string and character literals blanked out (each
/// replaced by spaces, newlines kept), or why it cannot be scanned.
pub fn code_only(text: &str) -> Result<Vec<char>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::with_capacity(chars.len());
    let mut i = 0;
    let mut line = 1;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let start_line = line;
        let blank = |out: &mut Vec<char>, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            out.extend([' ', ' ']);
            i += 2;
            loop {
                match (chars.get(i), chars.get(i + 1)) {
                    (Some('*'), Some('/')) => {
                        out.extend([' ', ' ']);
                        i += 2;
                        break;
                    }
                    (Some(&c), _) => {
                        line += usize::from(c == '\n');
                        blank(&mut out, c);
                        i += 1;
                    }
                    (None, _) => {
                        return Err(format!(
                            "the comment opened on line {start_line} is never closed"
                        ))
                    }
                }
            }
        } else if c == 'R' && next == Some('"') && !preceded_by_word(&chars, i) {
            // A raw string: R"delim( ... )delim".
            let open = i + 2;
            let Some(paren) = chars[open..].iter().position(|&c| c == '(') else {
                return Err(format!("malformed raw string on line {line}"));
            };
            let delim: String = chars[open..open + paren].iter().collect();
            let close: Vec<char> = format!("){delim}\"").chars().collect();
            let body = open + paren + 1;
            let Some(end) = (body..chars.len()).find(|&j| chars[j..].starts_with(&close)) else {
                return Err(format!(
                    "the raw string opened on line {start_line} is never closed"
                ));
            };
            for &c in &chars[i..end + close.len()] {
                line += usize::from(c == '\n');
                blank(&mut out, c);
            }
            i = end + close.len();
        } else if c == '"' || (c == '\'' && !preceded_by_digit(&chars, i)) {
            out.push(' ');
            i += 1;
            loop {
                match chars.get(i) {
                    Some('\\') => {
                        out.push(' ');
                        if let Some(&escaped) = chars.get(i + 1) {
                            line += usize::from(escaped == '\n');
                            blank(&mut out, escaped);
                        }
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        out.push(' ');
                        i += 1;
                        break;
                    }
                    Some('\n') | None => {
                        let what = if c == '"' { "string" } else { "character" };
                        return Err(format!(
                            "the {what} literal on line {start_line} is never closed"
                        ));
                    }
                    Some(_) => {
                        out.push(' ');
                        i += 1;
                    }
                }
            }
        } else {
            line += usize::from(c == '\n');
            out.push(c);
            i += 1;
        }
    }
    Ok(out)
}

fn preceded_by_word(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// A `'` right after a digit is C++14's digit separator (`1'000`), not a literal.
fn preceded_by_digit(chars: &[char], i: usize) -> bool {
    i > 0 && chars[i - 1].is_ascii_hexdigit() && preceded_by_word(chars, i)
}

/// Why the braces, brackets and parentheses of C++ `text` do not balance,
/// ignoring those inside comments and string or character literals.
pub fn balance_problem(text: &str) -> Option<String> {
    let code = match code_only(text) {
        Ok(code) => code,
        Err(problem) => return Some(problem),
    };
    let mut stack: Vec<(char, usize)> = Vec::new();
    let mut line = 1;
    for c in code {
        match c {
            '\n' => line += 1,
            '(' | '{' | '[' => stack.push((c, line)),
            ')' | '}' | ']' => {
                let want = match c {
                    ')' => '(',
                    '}' => '{',
                    _ => '[',
                };
                match stack.pop() {
                    Some((open, _)) if open == want => {}
                    Some((open, at)) => {
                        return Some(format!(
                        "unbalanced: `{c}` on line {line} closes the `{open}` opened on line {at}"
                    ))
                    }
                    None => {
                        return Some(format!("unbalanced: `{c}` on line {line} closes nothing"))
                    }
                }
            }
            _ => {}
        }
    }
    stack
        .pop()
        .map(|(open, at)| format!("unbalanced: the `{open}` opened on line {at} is never closed"))
}

/// Whether C++ `text` defines `name(...) { ... }` (not merely calls it).
pub fn defines_function(text: &str, name: &str) -> bool {
    let Ok(code) = code_only(text) else {
        return false;
    };
    let target: Vec<char> = name.chars().collect();
    let is_word = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric() || *c == '_');
    (0..code.len()).any(|i| {
        if !code[i..].starts_with(&target)
            || (i > 0 && is_word(code.get(i - 1)))
            || is_word(code.get(i + target.len()))
        {
            return false;
        }
        let mut j = i + target.len();
        while code.get(j).is_some_and(|c| c.is_whitespace()) {
            j += 1;
        }
        if code.get(j) != Some(&'(') {
            return false;
        }
        let mut depth = 0usize;
        while let Some(&c) = code.get(j) {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        // After the parameter list: qualifiers (`const`, `noexcept`) may come
        // before the body, but a `;` means a declaration or a call.
        code[j.saturating_add(1).min(code.len())..]
            .iter()
            .find(|c| matches!(c, '{' | ';' | '}' | ')' | ','))
            == Some(&'{')
    })
}
