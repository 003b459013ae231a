//! Log lines in the shape controller-runtime's zap logger gives Flux's controllers, so that
//! `flux logs`, log pipelines and alerts written for Flux read ours.
//!
//! JSON: one object per line, `level` (lower case), `ts` (ISO 8601, milliseconds, UTC),
//! `logger` (outside a reconcile), `msg`, then the reconcile's context (`controller`,
//! `controllerGroup`, `controllerKind`, `<Kind>: {name, namespace}` as in
//! `Kustomization: {name, namespace}`, `namespace`, `name`, `reconcileID`, `revision`) and the
//! event's own fields (`error`, ...). Console: the same fields, tab separated, for people.

use std::io::Write;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::LogEncoding;
use crate::identity::ControllerIdentity;

/// The span every reconcile runs in; its fields become the context of each line inside it.
pub(crate) const RECONCILE_SPAN: &str = "reconcile";

/// The span of one reconcile of an object of the controller `identity`, with the context
/// controller-runtime gives Flux's reconcile loggers; `revision` is recorded once the
/// artifact is known.
pub fn reconcile_span(identity: &ControllerIdentity, namespace: &str, name: &str) -> tracing::Span {
    tracing::info_span!(
        "reconcile",
        controller = identity.controller,
        controllerGroup = identity.group,
        controllerKind = identity.kind,
        namespace = %namespace,
        name = %name,
        reconcileID = %reconcile_id(rand::random()),
        revision = tracing::field::Empty,
    )
}

/// A reconcile ID as controller-runtime prints it: a random (version 4) UUID.
pub(crate) fn reconcile_id(random: u128) -> String {
    let bits = (random & !(0xf << 76) & !(0b11 << 62)) | (0x4 << 76) | (0b10 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Fields recorded on a span, in the order they were declared.
#[derive(Default)]
struct SpanFields(Vec<(String, Value)>);

/// Collects tracing fields as JSON values; `message` is the line's `msg`.
#[derive(Default)]
struct FieldVisitor(Vec<(String, Value)>);

/// Fields Flux's lines carry as JSON objects (a change set's `output` map): recorded as JSON
/// text, written as the object it spells.
const JSON_FIELDS: &[&str] = &["output"];

impl FieldVisitor {
    fn put(&mut self, field: &Field, value: Value) {
        let value = match value {
            Value::String(text) if JSON_FIELDS.contains(&field.name()) => {
                serde_json::from_str::<Value>(&text)
                    .ok()
                    .filter(|v| v.is_object() || v.is_array())
                    .unwrap_or(Value::String(text))
            }
            other => other,
        };
        let name = field.name();
        match self.0.iter_mut().find(|(key, _)| key == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name.to_string(), value)),
        }
    }
}

impl Visit for FieldVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::from(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, Value::from(format!("{value:?}")));
    }
}

/// Flux's level names: logr has no warning level, so warnings are `info` lines.
pub(crate) fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN | Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// zap's ISO 8601 encoder: milliseconds, `Z` for UTC.
pub(crate) fn timestamp(now: Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// The context controller-runtime attaches to a reconcile's logger, from the reconcile span's
/// fields: the object appears once as `{Kind: {name, namespace}}` and again flat, as Flux's
/// lines carry both. Fields without a value (a revision not known yet) are left out.
fn reconcile_context(span: &[(String, Value)]) -> Vec<(String, Value)> {
    let get = |key: &str| span.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let mut context = Vec::new();
    for key in ["controller", "controllerGroup", "controllerKind"] {
        if let Some(value) = get(key) {
            context.push((key.to_string(), value));
        }
    }
    let kind = get("controllerKind").and_then(|k| k.as_str().map(str::to_string));
    if let (Some(kind), Some(name), Some(namespace)) = (kind, get("name"), get("namespace")) {
        context.push((kind, serde_json::json!({"name": name, "namespace": namespace})));
    }
    let known = ["controller", "controllerGroup", "controllerKind"];
    context.extend(
        span.iter()
            .filter(|(key, _)| !known.contains(&key.as_str()))
            .cloned(),
    );
    context
}

/// One log line, before encoding.
pub(crate) struct Line<'a> {
    pub level: Level,
    pub ts: String,
    /// The component, for lines outside a reconcile (controller-runtime names those loggers).
    pub logger: Option<&'a str>,
    pub msg: String,
    /// Reconcile context first, then the event's fields; a later key replaces an earlier one.
    pub fields: Vec<(String, Value)>,
}

impl Line<'_> {
    fn fields_without_duplicates(&self) -> Vec<&(String, Value)> {
        let mut kept: Vec<&(String, Value)> = Vec::new();
        for entry in &self.fields {
            match kept.iter_mut().find(|(key, _)| *key == entry.0) {
                Some(slot) => *slot = entry,
                None => kept.push(entry),
            }
        }
        kept
    }

    pub(crate) fn json(&self) -> String {
        let mut out = String::from("{");
        let mut push = |key: &str, value: &Value| {
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(&Value::from(key).to_string());
            out.push(':');
            out.push_str(&value.to_string());
        };
        push("level", &Value::from(level_name(self.level)));
        push("ts", &Value::from(self.ts.as_str()));
        if let Some(logger) = self.logger {
            push("logger", &Value::from(logger));
        }
        push("msg", &Value::from(self.msg.as_str()));
        for (key, value) in self.fields_without_duplicates() {
            push(key, value);
        }
        out.push_str("}\n");
        out
    }

    pub(crate) fn console(&self) -> String {
        let mut out = format!("{}\t{}", self.ts, level_name(self.level).to_uppercase());
        if let Some(logger) = self.logger {
            out.push('\t');
            out.push_str(logger);
        }
        out.push('\t');
        out.push_str(&self.msg);
        let fields = self.fields_without_duplicates();
        if !fields.is_empty() {
            let object: serde_json::Map<String, Value> = fields.into_iter().cloned().collect();
            out.push('\t');
            out.push_str(&Value::Object(object).to_string());
        }
        out.push('\n');
        out
    }
}

/// The logger name of a line outside a reconcile: the module that wrote it.
fn logger_name(target: &str) -> &str {
    target.rsplit("::").next().unwrap_or(target)
}

/// Writes every event as a [`Line`] to `writer` (stderr in the controller, as zap does).
pub(crate) struct FluxLayer<W> {
    encoding: LogEncoding,
    writer: W,
}

impl<W> FluxLayer<W> {
    pub(crate) fn new(encoding: LogEncoding, writer: W) -> Self {
        Self { encoding, writer }
    }
}

impl<S, W> tracing_subscriber::Layer<S> for FluxLayer<W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + 'static,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut visitor = FieldVisitor::default();
        attrs.record(&mut visitor);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(visitor.0));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(fields) = extensions.get_mut::<SpanFields>() {
            let mut visitor = FieldVisitor(std::mem::take(&mut fields.0));
            values.record(&mut visitor);
            fields.0 = visitor.0;
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Vec::new();
        let mut in_reconcile = false;
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(SpanFields(span_fields)) = extensions.get::<SpanFields>() else {
                    continue;
                };
                if span.name() == RECONCILE_SPAN {
                    in_reconcile = true;
                    fields.extend(reconcile_context(span_fields));
                } else {
                    fields.extend(span_fields.iter().cloned());
                }
            }
        }
        let mut visitor = FieldVisitor::default();
        event.record(&mut visitor);
        let mut msg = String::new();
        for (key, value) in visitor.0 {
            if key == "message" {
                msg = value.as_str().map(str::to_string).unwrap_or_default();
            } else {
                fields.push((key, value));
            }
        }
        let metadata = event.metadata();
        let line = Line {
            level: *metadata.level(),
            ts: timestamp(Timestamp::now()),
            logger: (!in_reconcile).then(|| logger_name(metadata.target())),
            msg,
            fields,
        };
        let text = match self.encoding {
            LogEncoding::Json => line.json(),
            LogEncoding::Console => line.console(),
        };
        // One write per line, so lines of concurrent reconciles never interleave.
        let _ = self.writer.make_writer().write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;
    use crate::identity::testing::{IMAGE_REPOSITORY, KUSTOMIZATION};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn lines(encoding: LogEncoding, log: impl FnOnce()) -> Vec<String> {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::registry().with(FluxLayer::new(encoding, buffer.clone()));
        tracing::subscriber::with_default(subscriber, log);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    fn reconcile_lines() -> impl FnOnce() {
        || {
            tracing::info!(target: "kustomize_controller::controller::leader", "acquired leader lease");
            let span = reconcile_span(&KUSTOMIZATION, "apps", "web");
            let _entered = span.enter();
            span.record("revision", "main@sha1:1f3c");
            tracing::error!(error = "dry-run failed", "Reconciliation failed");
        }
    }

    #[test]
    fn json_lines_have_controller_runtimes_keys_in_its_order() {
        let lines = lines(LogEncoding::Json, reconcile_lines());
        let setup: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(setup["level"], "info");
        assert_eq!(setup["logger"], "leader");
        assert_eq!(setup["msg"], "acquired leader lease");

        let line: Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(
            line,
            serde_json::json!({
                "level": "error", "ts": line["ts"], "msg": "Reconciliation failed",
                "controller": "kustomization", "controllerGroup": "kustomize.toolkit.fluxcd.io",
                "controllerKind": "Kustomization",
                "Kustomization": {"name": "web", "namespace": "apps"},
                "namespace": "apps", "name": "web", "reconcileID": line["reconcileID"],
                "revision": "main@sha1:1f3c", "error": "dry-run failed",
            })
        );
        // zap's order: level, ts, (logger), msg, then the context.
        assert!(lines[1].starts_with(r#"{"level":"error","ts":""#), "{}", lines[1]);
        assert!(
            lines[1].contains(r#"","msg":"Reconciliation failed","controller":"kustomization","#),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn another_controllers_lines_carry_its_own_names() {
        let lines = lines(LogEncoding::Json, || {
            let span = reconcile_span(&IMAGE_REPOSITORY, "apps", "podinfo");
            let _entered = span.enter();
            tracing::info!("scanned");
        });
        let line: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(line["controller"], "imagerepository");
        assert_eq!(line["controllerGroup"], "image.toolkit.fluxcd.io");
        assert_eq!(
            line["ImageRepository"],
            serde_json::json!({"name": "podinfo", "namespace": "apps"})
        );
    }

    #[test]
    fn a_change_set_output_is_written_as_the_map_it_is() {
        let lines = lines(LogEncoding::Json, || {
            let output = serde_json::json!({"ConfigMap/apps/a": "created"});
            tracing::info!(%output, note = r#"{"not": "a map field"}"#, "server-side apply completed");
        });
        let line: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(line["output"], serde_json::json!({"ConfigMap/apps/a": "created"}));
        assert_eq!(
            line["note"], r#"{"not": "a map field"}"#,
            "other fields stay text"
        );
    }

    #[test]
    fn reconcile_ids_are_version_4_uuids() {
        assert_eq!(reconcile_id(0), "00000000-0000-4000-8000-000000000000");
        assert_eq!(reconcile_id(u128::MAX), "ffffffff-ffff-4fff-bfff-ffffffffffff");
    }

    #[test]
    fn timestamps_are_zaps_iso8601_with_milliseconds() {
        let now = Timestamp::from_millisecond(1_767_225_605_042).unwrap();
        assert_eq!(timestamp(now), "2026-01-01T00:00:05.042Z");
    }

    #[test]
    fn console_lines_are_tab_separated_for_people() {
        let lines = lines(LogEncoding::Console, reconcile_lines());
        let parts: Vec<&str> = lines[1].split('\t').collect();
        assert_eq!(parts[1..3], ["ERROR", "Reconciliation failed"]);
        let fields: Value = serde_json::from_str(parts[3]).unwrap();
        assert_eq!(fields["name"], "web");
        assert_eq!(fields["error"], "dry-run failed");
        assert_eq!(lines[0].split('\t').nth(2), Some("leader"));
    }
}
