//! The three forms of a conformance [`Report`]: a table for people, JSON for
//! scripts and JUnit XML for CI systems. Pure formatting: nothing here runs a
//! check or touches the plugin.

use std::io;

use quick_xml::events::{BytesDecl, BytesText, Event};
use quick_xml::Writer;
use serde_json::{json, Value};

use super::{CheckResult, Report, Status};

/// The report as a table: one row per check (name, result, and the reason for
/// a failure or skip, else what the check guarantees), then a summary line.
pub fn to_table(report: &Report) -> String {
    let mut out = String::new();
    out.push_str(&format!("Conformance of {}\n", report.plugin.display()));
    match (&report.device, &report.plugin_version, &report.api_version) {
        (Some(device), version, api) => out.push_str(&format!(
            "  device `{device}`, plugin version {}, built against kiln-plugin-api {}; host speaks {}\n",
            version.as_deref().unwrap_or("?"),
            api.as_deref().unwrap_or("?"),
            report.host_api_version
        )),
        _ => out.push_str(&format!(
            "  (manifest not read); host speaks kiln-plugin-api {}\n",
            report.host_api_version
        )),
    }
    out.push('\n');
    let width = report
        .checks
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(5)
        .max(5);
    out.push_str(&format!("{:<width$}  {:<6}  DETAIL\n", "CHECK", "RESULT"));
    for c in &report.checks {
        let result = match c.status {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        let detail = match c.status {
            Status::Pass => c.description.clone(),
            _ => one_line(&c.reason),
        };
        out.push_str(&format!("{:<width$}  {result:<6}  {detail}\n", c.name));
    }
    if !report.unreported_failures.is_empty() {
        out.push_str(&format!(
            "\nNot shown (left out by --only) but failed: {}\n",
            report.unreported_failures.join(", ")
        ));
    }
    out.push_str(&format!("\n{}\n", summary(report)));
    out
}

/// `conformance: 36 passed, 1 failed, 2 skipped`, the plain closing line CI
/// log readers understand.
pub fn summary(report: &Report) -> String {
    format!(
        "conformance: {} passed, {} failed, {} skipped",
        report.count(Status::Pass),
        report.count(Status::Fail),
        report.count(Status::Skip)
    )
}

fn one_line(text: &str) -> String {
    text.split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The report as JSON: the plugin, the counts and one object per check.
pub fn to_json(report: &Report) -> Value {
    json!({
        "plugin": report.plugin,
        "device": report.device,
        "plugin_version": report.plugin_version,
        "api_version": report.api_version,
        "host_api_version": report.host_api_version,
        "timeout_seconds": report.timeout_seconds,
        "refused": report.refused,
        "passed": report.count(Status::Pass),
        "failed": report.count(Status::Fail),
        "skipped": report.count(Status::Skip),
        "ok": report.passed(),
        "checks": report.checks,
        "unreported_failures": report.unreported_failures,
    })
}

/// Text that XML 1.0 can carry: characters it forbids even escaped (most
/// control characters) are written as `\u{..}`.
fn xml_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let allowed = matches!(c, '\t' | '\n' | '\r')
            || ('\u{20}'..='\u{D7FF}').contains(&c)
            || ('\u{E000}'..='\u{FFFD}').contains(&c)
            || c >= '\u{10000}';
        if allowed {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:04X}}}", c as u32));
        }
    }
    out
}

/// The report as JUnit XML: one `<testsuite>` for the plugin, one
/// `<testcase classname="AREA" name="CHECK">` per check, with `<failure>` or
/// `<skipped>` carrying the reason. Every value is escaped by `quick-xml`.
pub fn to_junit(report: &Report) -> io::Result<String> {
    let mut writer = Writer::new_with_indent(Vec::new(), b' ', 2);
    writer.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let tests = report.checks.len().to_string();
    let failures = report.count(Status::Fail).to_string();
    let skipped = report.count(Status::Skip).to_string();
    let time: f64 = report.checks.iter().map(|c| c.seconds).sum();
    let time = format!("{time:.3}");
    let suite_name = xml_safe(&format!(
        "kiln-conformance {}",
        report.device.as_deref().unwrap_or_else(|| {
            report
                .plugin
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("plugin")
        })
    ));
    let plugin = xml_safe(&report.plugin.display().to_string());
    let counts = [
        ("tests", tests.as_str()),
        ("failures", failures.as_str()),
        ("errors", "0"),
        ("skipped", skipped.as_str()),
        ("time", time.as_str()),
    ];
    writer
        .create_element("testsuites")
        .with_attribute(("name", "kiln-conformance"))
        .with_attributes(counts)
        .write_inner_content(|w| {
            w.create_element("testsuite")
                .with_attribute(("name", suite_name.as_str()))
                .with_attributes(counts)
                .write_inner_content(|w| {
                    w.create_element("properties").write_inner_content(|w| {
                        let mut properties = vec![
                            ("plugin", plugin.clone()),
                            ("host_api_version", report.host_api_version.clone()),
                            ("timeout_seconds", report.timeout_seconds.to_string()),
                        ];
                        for (key, value) in [
                            ("device", &report.device),
                            ("plugin_version", &report.plugin_version),
                            ("api_version", &report.api_version),
                        ] {
                            if let Some(value) = value {
                                properties.push((key, xml_safe(value)));
                            }
                        }
                        for (name, value) in &properties {
                            w.create_element("property")
                                .with_attribute(("name", *name))
                                .with_attribute(("value", value.as_str()))
                                .write_empty()?;
                        }
                        Ok(())
                    })?;
                    for check in &report.checks {
                        write_case(w, check)?;
                    }
                    Ok(())
                })?;
            Ok(())
        })?;
    let mut xml = String::from_utf8(writer.into_inner())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    xml.push('\n');
    Ok(xml)
}

fn write_case(w: &mut Writer<Vec<u8>>, check: &CheckResult) -> io::Result<()> {
    let time = format!("{:.3}", check.seconds);
    let element = w
        .create_element("testcase")
        .with_attribute(("classname", check.area.as_str()))
        .with_attribute(("name", check.name.as_str()))
        .with_attribute(("time", time.as_str()));
    let reason = xml_safe(&check.reason);
    let message = one_line(&reason);
    match check.status {
        Status::Pass => {
            element.write_empty()?;
        }
        Status::Fail => {
            element.write_inner_content(|w| {
                w.create_element("failure")
                    .with_attribute(("message", message.as_str()))
                    .with_attribute(("type", "conformance"))
                    .write_text_content(BytesText::new(&format!(
                        "{}\n\nGuarantee: {}",
                        reason,
                        xml_safe(&check.description)
                    )))?;
                Ok(())
            })?;
        }
        Status::Skip => {
            element.write_inner_content(|w| {
                w.create_element("skipped")
                    .with_attribute(("message", message.as_str()))
                    .write_empty()?;
                Ok(())
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn report() -> Report {
        let case = |name: &str, status, reason: &str| CheckResult {
            name: name.to_string(),
            area: name.split('.').next().unwrap_or("").to_string(),
            description: format!("{name} guarantees <things> & more"),
            status,
            reason: reason.to_string(),
            seconds: 0.002,
        };
        Report {
            plugin: PathBuf::from("/tmp/lib\"odd\".so"),
            device: Some("gxu".to_string()),
            plugin_version: Some("0.1.0".to_string()),
            api_version: Some("1.0.0".to_string()),
            host_api_version: "1.0.0".to_string(),
            timeout_seconds: 10.0,
            refused: None,
            unreported_failures: Vec::new(),
            checks: vec![
                case("load.init", Status::Pass, ""),
                case(
                    "overrides.set_device",
                    Status::Fail,
                    "gave \"a<b>&c\"\nline two \u{1}",
                ),
                case(
                    "overrides.tma_descriptor_helpers",
                    Status::Skip,
                    "not supported",
                ),
            ],
        }
    }

    #[test]
    fn table_shows_reasons_for_failures_and_the_summary() {
        let table = to_table(&report());
        assert!(table.contains("overrides.set_device"));
        assert!(
            table.contains("FAIL    gave \"a<b>&c\" / line two"),
            "{table}"
        );
        assert!(table.ends_with("conformance: 1 passed, 1 failed, 1 skipped\n"));
    }

    #[test]
    fn junit_escapes_everything_and_drops_forbidden_characters() {
        let xml = to_junit(&report()).unwrap();
        assert!(
            xml.contains("tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\""),
            "{xml}"
        );
        assert!(xml.contains("&lt;b&gt;&amp;c"), "{xml}");
        assert!(!xml.contains('\u{1}'));
        assert!(xml.contains("\\u{0001}"));
        assert!(xml.contains("classname=\"overrides\" name=\"overrides.set_device\""));
    }

    #[test]
    fn json_has_counts_and_checks() {
        let value = to_json(&report());
        assert_eq!(value["failed"], 1);
        assert_eq!(value["checks"][1]["status"], "fail");
        assert_eq!(value["ok"], false);
    }
}
