//! The samples of a Prometheus text exposition page (format 0.0.4): `name{label="value",…}
//! value [timestamp]` lines; comments (`# HELP`, `# TYPE`) and blank lines are skipped.
//! Only what advice reads is kept: names, labels and values.

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) value: f64,
}

impl Sample {
    pub(crate) fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A line that is not a sample, with its 1-based number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub(crate) line: usize,
    pub(crate) reason: &'static str,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// The samples of `page`, in order, one at a time: a page of many small lines never
/// becomes many allocations at once.
pub(crate) fn samples(page: &str) -> impl Iterator<Item = Result<Sample, ParseError>> + '_ {
    page.lines().enumerate().filter_map(|(index, line)| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        Some(sample(line).map_err(|reason| ParseError {
            line: index + 1,
            reason,
        }))
    })
}

fn sample(line: &str) -> Result<Sample, &'static str> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("a name without a value")?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err("not a metric name");
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        rest = after_brace;
        loop {
            rest = rest.trim_start();
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find('=').ok_or("a label without '='")?;
            let label = rest[..eq].trim();
            if !is_label_name(label) {
                return Err("not a label name");
            }
            let (value, after) = quoted(rest[eq + 1..].trim_start())?;
            labels.push((label.to_owned(), value));
            rest = after.trim_start();
            if let Some(after) = rest.strip_prefix(',') {
                rest = after;
            } else if !rest.starts_with('}') {
                return Err("labels not separated by ','");
            }
        }
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v
            .parse::<f64>()
            .map_err(|_| "a value that is not a number")?,
    };
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| "a timestamp that is not an integer")?;
    }
    if fields.next().is_some() {
        return Err("text after the value and timestamp");
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// A `"…"` label value with `\\`, `\"` and `\n` escapes, and what follows it.
fn quoted(text: &str) -> Result<(String, &str), &'static str> {
    let body = text.strip_prefix('"').ok_or("a label value without '\"'")?;
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &body[i + 1..])),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, '\\')) => value.push('\\'),
                Some((_, '"')) => value.push('"'),
                _ => return Err("an unknown escape in a label value"),
            },
            c => value.push(c),
        }
    }
    Err("an unterminated label value")
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_labels_values_and_skips_comments() {
        let page = "# HELP kpress_produce_bytes_in_total bytes\n\
                    # TYPE kpress_produce_bytes_in_total counter\n\
                    kpress_produce_bytes_in_total{topic=\"logs\"} 12345\n\
                    \n\
                    kpress_connections_open 3 1700000000000\n\
                    kpress_batch_bytes_bucket{topic=\"a\\\"b\\\\c\\nd\",le=\"+Inf\",} 7\n\
                    x_seconds{a=\"1\"} 1.5e-3\n\
                    nan NaN\n";
        let samples: Vec<Sample> = samples(page).collect::<Result<_, _>>().unwrap();
        assert_eq!(samples.len(), 5);
        assert_eq!(samples[0].name, "kpress_produce_bytes_in_total");
        assert_eq!(samples[0].label("topic"), Some("logs"));
        assert_eq!(samples[0].value, 12345.0);
        assert_eq!(samples[1].labels, vec![]);
        assert_eq!(samples[1].value, 3.0);
        assert_eq!(samples[2].label("topic"), Some("a\"b\\c\nd"));
        assert_eq!(samples[2].label("le"), Some("+Inf"));
        assert_eq!(samples[3].value, 0.0015);
        assert!(samples[4].value.is_nan());
    }

    #[test]
    fn names_the_bad_line() {
        for (page, reason) in [
            ("a{b=\"c} 1", "an unterminated label value"),
            ("a{b=c} 1", "a label value without '\"'"),
            ("a{b=\"c\" d=\"e\"} 1", "labels not separated by ','"),
            ("a one", "a value that is not a number"),
            ("a", "a name without a value"),
            ("9a 1", "not a metric name"),
            ("a{9=\"\"} 1", "not a label name"),
            ("a 1 2 3", "text after the value and timestamp"),
        ] {
            let page = format!("# ok\n{page}\n");
            let err = samples(&page).find_map(Result::err).unwrap();
            assert_eq!(err, ParseError { line: 2, reason }, "{page}");
        }
    }
}
