//! The limits of one CEL expression. Expressions are tenant input and the `cel` crate has no
//! cost tracking: without limits a few hundred bytes build values that double per nesting
//! level (the process aborts on memory) or nest comprehensions that loop for minutes.
//!
//! The source's length and nesting are checked when it is parsed; then every call, list or
//! map element and comprehension range is wrapped in a call to [`CHARGE`], which measures the
//! value passing through and charges it to a [`Meter`] before the interpreter keeps it. The
//! meter stops the evaluation once the values built or copied exceed [`MAX_COST`], or once
//! [`TIME_LIMIT`] has passed. Parsing and evaluation run on a thread of their own ([`run`]):
//! off the async workers, with the stack the parser's recursion needs.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cel::common::ast::{CallExpr, EntryExpr, Expr, MapExpr, StructExpr, operators};
use cel::common::types::{CelBytes, CelList, CelMap, CelOptional, CelString};
use cel::common::value::{CowVal, Val};
use cel::parser::{Expression, Parser};
use cel::{Context, ExecutionError, FunctionContext};

/// The longest expression accepted. Real rules are a few hundred bytes; the limit bounds the
/// parse and how many literal elements one expression can spell.
pub(crate) const MAX_SOURCE_BYTES: usize = 4096;

/// How deep an expression may nest. The interpreter recurses once per level, and a chain such
/// as `a + a + a ...` parses into a nesting that the parser's own recursion limit lets through.
pub(crate) const MAX_DEPTH: usize = 64;

/// What one evaluation may build or copy, in bytes as [`size`] estimates them. Charged: every
/// value a call returns, every element put into a list or map, and every range a
/// comprehension iterates over (it copies each element). This bounds memory and most work.
pub(crate) const MAX_COST: u64 = 16 << 20;

/// How long one evaluation may run: the backstop for work that builds nothing, such as
/// comparing two large lists on every iteration of a loop.
pub(crate) const TIME_LIMIT: Duration = Duration::from_secs(1);

/// The stack CEL runs on. The parser recurses up to its limit of 96 nested rules, which takes
/// over 16 MiB in a debug build; the memory is reserved, not committed.
const STACK_BYTES: usize = 64 << 20;

/// Charged for every value on top of its string or bytes contents: the box and the pointer
/// that hold it in its list or map.
const VALUE_COST: u64 = 32;

/// The function the metering calls name. `@` cannot be written in CEL source, so no
/// expression calls it, or shadows it, by itself.
const CHARGE: &str = "@charge";

/// Runs `work` on a thread of its own, with the stack parsing needs, and waits for it without
/// holding an async worker. A caller that stops waiting leaves the thread to finish on its
/// own, which [`TIME_LIMIT`] bounds.
pub(super) async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("cel".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            // The receiver is gone only when nobody waits for the result any more.
            let _ = done.send(work());
        })
        .map_err(|e| format!("cannot start the CEL thread: {e}"))?;
    result
        .await
        .map_err(|_| "the CEL evaluation panicked".to_string())
}

/// Why an expression is refused before it runs.
#[derive(Debug)]
pub(super) enum Refusal {
    TooLong(usize),
    TooDeep,
    Parse(String),
}

/// The limit an evaluation ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Cost,
    Time,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Cost => write!(f, "cost limit ({} MiB of values built or copied)", MAX_COST >> 20),
            Limit::Time => write!(f, "time limit ({}s)", TIME_LIMIT.as_secs()),
        }
    }
}

/// Why an evaluation returned no value.
#[derive(Debug)]
pub(super) enum Stop {
    Limit(Limit),
    Error(ExecutionError),
}

/// A parsed expression whose calls, literal elements and ranges charge a [`Meter`].
#[derive(Debug)]
pub(super) struct Metered(Expression);

impl Metered {
    /// Parses `source` within the size and depth limits. Call it on a [`run`] thread: the
    /// parser recurses deeper than an async worker's stack holds.
    pub(super) fn parse(source: &str) -> Result<Self, Refusal> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(Refusal::TooLong(source.len()));
        }
        let mut expr = Parser::new()
            .parse(source)
            .map_err(|e| Refusal::Parse(e.to_string()))?;
        if deeper_than(&expr, MAX_DEPTH) {
            return Err(Refusal::TooDeep);
        }
        meter(&mut expr);
        Ok(Self(expr))
    }

    /// Evaluates in `context`, which [`Meter::install`] prepared, with a fresh budget. A limit
    /// wins over the result: CEL's `||` and `&&` may absorb the error that stopped a branch.
    pub(super) fn evaluate(&self, context: &Context, meter: &Meter) -> Result<cel::Value, Stop> {
        meter.start();
        let result = context.resolve(&self.0);
        match meter.exceeded() {
            Some(limit) => Err(Stop::Limit(limit)),
            None => result.map_err(Stop::Error),
        }
    }
}

/// The budget of one evaluation, shared with the [`CHARGE`] function of its context.
#[derive(Debug)]
pub(super) struct Meter(Mutex<Reading>);

#[derive(Debug)]
struct Reading {
    spent: u64,
    deadline: Instant,
    exceeded: Option<Limit>,
}

impl Reading {
    fn fresh() -> Self {
        Self {
            spent: 0,
            deadline: Instant::now() + TIME_LIMIT,
            exceeded: None,
        }
    }
}

impl Meter {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self(Mutex::new(Reading::fresh())))
    }

    /// Gives `context` the [`CHARGE`] function, charging this meter.
    pub(super) fn install(self: &Arc<Self>, context: &mut Context) {
        let meter = Arc::clone(self);
        let charge: Box<
            dyn for<'c, 'l> Fn(&mut FunctionContext<'c, 'l>) -> Result<CowVal<'c, 'l>, ExecutionError>
                + Send
                + Sync,
        > = Box::new(move |call| {
            let value = call
                .args
                .pop()
                .ok_or_else(ExecutionError::missing_argument_or_target)?;
            meter.charge(&*value).map_err(|limit| call.error(limit))?;
            Ok(value)
        });
        context
            .add_function(CHARGE, charge)
            .expect("no standard function is named @charge");
    }

    fn reading(&self) -> std::sync::MutexGuard<'_, Reading> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn start(&self) {
        *self.reading() = Reading::fresh();
    }

    fn exceeded(&self) -> Option<Limit> {
        self.reading().exceeded
    }

    /// Charges `value`, or fails with the limit it runs into. Once a limit is reached every
    /// later charge fails too, so the rest of the evaluation unwinds at once.
    fn charge(&self, value: &dyn Val) -> Result<(), Limit> {
        let mut reading = self.reading();
        if let Some(limit) = reading.exceeded {
            return Err(limit);
        }
        if Instant::now() >= reading.deadline {
            reading.exceeded = Some(Limit::Time);
            return Err(Limit::Time);
        }
        match size(value, MAX_COST - reading.spent) {
            Some(bytes) => {
                reading.spent += bytes;
                Ok(())
            }
            None => {
                reading.exceeded = Some(Limit::Cost);
                Err(Limit::Cost)
            }
        }
    }
}

/// The bytes `value` takes as charged: [`VALUE_COST`] per value, nested ones included, plus
/// string and bytes contents. `None` once over `cap`: measuring stops there, so it costs no
/// more than the budget it checks.
fn size(value: &dyn Val, cap: u64) -> Option<u64> {
    let mut total = 0u64;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        total += VALUE_COST;
        if let Some(string) = value.downcast_ref::<CelString>() {
            total += string.inner().len() as u64;
        } else if let Some(bytes) = value.downcast_ref::<CelBytes>() {
            total += bytes.inner().len() as u64;
        } else if let Some(list) = value.downcast_ref::<CelList>() {
            pending.extend(list.inner().iter().map(|item| &**item));
        } else if let Some(map) = value.downcast_ref::<CelMap>() {
            for (key, item) in map.inner() {
                pending.push(key.inner());
                pending.push(&**item);
            }
        } else if let Some(optional) = value.downcast_ref::<CelOptional>() {
            pending.extend(optional.inner());
        }
        if total > cap {
            return None;
        }
    }
    Some(total)
}

/// Whether `expr` nests deeper than `levels`, looking no deeper than that.
fn deeper_than(expr: &Expression, levels: usize) -> bool {
    let mut deeper = false;
    for_each_child(expr, &mut |child| {
        deeper = deeper || levels == 0 || deeper_than(child, levels - 1);
    });
    deeper
}

fn for_each_child<'e>(expr: &'e Expression, visit: &mut impl FnMut(&'e Expression)) {
    match &expr.expr {
        Expr::Call(call) => {
            call.target.iter().for_each(|target| visit(target));
            call.args.iter().for_each(visit);
        }
        Expr::Comprehension(c) => {
            for child in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                visit(child);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(visit),
        Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
            entries.iter().for_each(|entry| match &entry.expr {
                EntryExpr::MapEntry(entry) => {
                    visit(&entry.key);
                    visit(&entry.value);
                }
                EntryExpr::StructField(field) => visit(&field.value),
            })
        }
        Expr::Select(select) => visit(&select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// Wraps what `expr` builds or copies in [`CHARGE`] calls: the result of every call, every
/// element of a list or map literal, every comprehension range.
fn meter(expr: &mut Expression) {
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(target) = call.target.as_deref_mut() {
                meter(target);
            }
            call.args.iter_mut().for_each(meter);
            charge(expr);
        }
        Expr::Comprehension(c) => {
            meter(&mut c.iter_range);
            charge(&mut c.iter_range);
            meter(&mut c.accu_init);
            meter(&mut c.loop_cond);
            meter_step(&mut c.loop_step, &c.accu_var);
            meter(&mut c.result);
        }
        Expr::List(list) => list.elements.iter_mut().for_each(meter_element),
        Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
            entries.iter_mut().for_each(|entry| match &mut entry.expr {
                EntryExpr::MapEntry(entry) => {
                    meter_element(&mut entry.key);
                    meter_element(&mut entry.value);
                }
                EntryExpr::StructField(field) => meter_element(&mut field.value),
            })
        }
        Expr::Select(select) => meter(&mut select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// An element is copied into its list or map even when it only names a variable: charged.
fn meter_element(element: &mut Expression) {
    meter(element);
    if !matches!(element.expr, Expr::Call(_)) {
        charge(element);
    }
}

/// The loop step of a macro keeps the shape the interpreter recognises: `@result + [e]`
/// (`map`, `filter`) appends in place, and `@result && p` / `@result || p` (`all`, `exists`)
/// let a later element absorb an earlier error. What they are built of is metered.
fn meter_step(step: &mut Expression, accu: &str) {
    let is_accu = |e: &Expression| matches!(&e.expr, Expr::Ident(name) if name == accu);
    let Expr::Call(CallExpr {
        func_name,
        target: None,
        args,
    }) = &mut step.expr
    else {
        return meter(step);
    };
    match (func_name.as_str(), args.as_mut_slice()) {
        (operators::CONDITIONAL, [guard, then, otherwise]) => {
            meter(guard);
            meter_step(then, accu);
            meter_step(otherwise, accu);
        }
        (operators::ADD, [result, appended]) if is_accu(result) && matches!(appended.expr, Expr::List(_)) => {
            meter(appended);
        }
        (operators::LOGICAL_AND | operators::LOGICAL_OR, [result, operand]) if is_accu(result) => {
            meter(operand);
        }
        _ => meter(step),
    }
}

/// Replaces `expr` by `@charge(expr)`.
fn charge(expr: &mut Expression) {
    let charged = std::mem::take(&mut expr.expr);
    expr.expr = Expr::Call(CallExpr {
        func_name: CHARGE.to_string(),
        target: None,
        args: vec![Expression {
            id: expr.id,
            expr: charged,
        }],
    });
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use serde_json::{Value, json};

    use super::super::{CelError, HealthExprs, compile};
    use super::*;
    use crate::api::kustomization::CustomHealthCheck;
    use crate::error::StepError;
    use crate::health::kstatus::Status;

    fn rule(current: &str) -> CustomHealthCheck {
        CustomHealthCheck {
            api_version: "example.com/v1".into(),
            kind: Some("Widget".into()),
            current: current.into(),
            in_progress: None,
            failed: None,
        }
    }

    fn widget(status: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": status})
    }

    async fn judged(exprs: &HealthExprs, object: &Value) -> Result<Status, CelError> {
        let evaluation = exprs.evaluate(object).expect("the rule applies");
        evaluation.await.map(|status| status.status)
    }

    /// `current` judging a Widget without status.
    async fn current_of(current: &str) -> Result<Status, CelError> {
        judged(&compile(&[rule(current)]).await?, &widget(json!({}))).await
    }

    /// Stopped by the cost limit; a debug build on a loaded machine (CI's) may reach the
    /// one-second time limit first, which stops it as surely.
    fn assert_stopped_by_cost(err: &CelError) {
        assert!(
            matches!(
                err,
                CelError::Exceeded {
                    limit: Limit::Cost | Limit::Time,
                    ..
                }
            ),
            "{err}"
        );
    }

    /// `['ab']` doubled `levels` times by `map`, each level a copy of the one before.
    fn doubling_string(levels: usize) -> String {
        format!("['ab']{}.all(s, size(s) > 0)", ".map(s, s + s)".repeat(levels))
    }

    /// `depth` comprehensions nested over ten-element ranges: 10^depth iterations.
    fn nested_ranges(depth: usize) -> String {
        (0..depth).fold("true".to_string(), |body, level| {
            format!("[0,1,2,3,4,5,6,7,8,9].all(x{level}, {body})")
        })
    }

    #[tokio::test]
    async fn an_expression_over_the_size_limit_is_refused_naming_its_field() {
        // Before: any length was parsed and evaluated.
        let long = format!("status.phase == '{}'", "x".repeat(MAX_SOURCE_BYTES));
        let mut second = rule("true");
        second.kind = Some("Gadget".into());
        second.failed = Some(long.clone());
        let err = compile(&[rule("true"), second]).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "healthCheckExprs[1].failed: CEL expression is {} bytes, over the limit of 4096",
                long.len()
            )
        );
        assert!(err.is_terminal());
    }

    #[tokio::test]
    async fn a_nesting_deeper_than_the_interpreter_may_recurse_is_refused_naming_its_field() {
        // Before: a chain `1 + 1 + ...` of a few hundred terms, which the parser's recursion
        // limit lets through, overflowed the evaluating thread's stack and aborted the process.
        let chain = format!("{} > 0", vec!["1"; MAX_DEPTH + 2].join(" + "));
        let err = current_of(&chain).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "healthCheckExprs[0].current: CEL expression nests deeper than 64 levels"
        );
        assert!(err.is_terminal());
        // The deepest accepted nesting of the kinds that take the most stack evaluates.
        let lists = format!(
            "size({}1{}) == 1",
            "[".repeat(MAX_DEPTH - 4),
            "]".repeat(MAX_DEPTH - 4)
        );
        let comprehensions = format!("{}true{}", "[1].all(x, ".repeat(30), ")".repeat(30));
        for deep in [
            lists,
            comprehensions,
            format!("{} > 0", vec!["1"; MAX_DEPTH - 2].join(" + ")),
        ] {
            assert_eq!(current_of(&deep).await.unwrap(), Status::Current, "{deep}");
        }
    }

    #[tokio::test]
    async fn a_value_doubling_per_level_is_stopped_at_the_cost_limit() {
        // Before: the string reached 2^25 bytes and the expression judged the Widget Current;
        // with 50 levels instead of 24 the process aborted on memory.
        let err = current_of(&doubling_string(24)).await.unwrap_err();
        assert_stopped_by_cost(&err);
        if matches!(
            err,
            CelError::Exceeded {
                limit: Limit::Cost,
                ..
            }
        ) {
            assert_eq!(
                err.to_string(),
                "healthCheckExprs[0].current: evaluation exceeded its cost limit (16 MiB of values built or copied)"
            );
        }
        assert!(err.is_terminal());
        // Lists nest instead of growing: [[1, 1], [2, 2]], then [[[1, 1], [1, 1]], ...].
        let lists = format!("[1, 2]{}.size() == 2", ".map(a, [a, a])".repeat(18));
        assert_stopped_by_cost(&current_of(&lists).await.unwrap_err());
        // A real rule over a Widget with a thousand conditions stays well within.
        let conditions: Vec<Value> = (0..1000)
            .map(|i| json!({"type": format!("Part{i}"), "status": "True", "message": "x".repeat(200)}))
            .collect();
        let exprs = compile(&[rule(
            "status.conditions.filter(c, c.status == 'True').all(c, c.type.startsWith('Part'))",
        )])
        .await
        .unwrap();
        let many = widget(json!({"conditions": conditions}));
        assert_eq!(judged(&exprs, &many).await.unwrap(), Status::Current);
    }

    #[tokio::test]
    async fn nested_comprehensions_are_stopped_at_a_limit() {
        // Before: a million iterations ran to the end (ten million in 221 bytes held the
        // async worker for over a minute).
        let err = current_of(&nested_ranges(6)).await.unwrap_err();
        // The cost limit comes first unless the machine is loaded enough for the time limit.
        assert!(matches!(err, CelError::Exceeded { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with("healthCheckExprs[0].current: evaluation exceeded its"),
            "{err}"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_slow_expression_runs_off_the_async_workers_until_its_time_limit() {
        // Comparing two 20 000-element lists per element builds nothing, so only the time
        // limit stops it. Before: it ran on the caller's thread (here the only worker of the
        // runtime) to the end, holding every other task.
        let exprs = compile(&[rule("status.items.all(x, status.items == status.items)")])
            .await
            .unwrap();
        let object = widget(json!({"items": (0..20_000).collect::<Vec<_>>()}));
        let mut evaluation = std::pin::pin!(judged(&exprs, &object));
        let other_task = tokio::spawn(async {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        tokio::select! {
            biased;
            judged = &mut evaluation => panic!("the evaluation held the worker until it ended: {judged:?}"),
            done = other_task => done.unwrap(),
        }
        let err = evaluation.await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "healthCheckExprs[0].current: evaluation exceeded its time limit (1s)"
        );
        assert!(err.is_terminal());
    }

    /// The environment variable that makes [`hostile_expressions_are_refused_in_little_memory_and_cpu`]
    /// evaluate one case as the child it starts.
    const CHILD_CASE: &str = "KC_CEL_HOSTILE_CASE";

    /// The hostile expressions at full size, each in a child process of this test binary,
    /// measured by the kernel (GNU time reports wait4's ru_maxrss, ru_utime and ru_stime) and
    /// bounded by CPU and address-space ulimits so that a failing bound cannot take the test
    /// runner down. Before: "memory" aborted allocating 2^59 bytes, "cpu" (ten million
    /// iterations) ran out of CPU time, and "stack" overflowed the stack while parsing.
    #[tokio::test]
    async fn hostile_expressions_are_refused_in_little_memory_and_cpu() {
        let cases = [
            ("memory", doubling_string(58), "evaluation exceeded its"),
            ("cpu", nested_ranges(7), "evaluation exceeded its"),
            (
                "stack",
                format!("{}1{} == []", "[".repeat(90), "]".repeat(90)),
                "nests deeper than 64 levels",
            ),
        ];
        if let Ok(case) = std::env::var(CHILD_CASE) {
            let (_, expr, _) = cases.iter().find(|(name, ..)| *name == case).unwrap();
            let judged = current_of(expr).await;
            println!(
                "{} bytes: {}",
                expr.len(),
                judged.map_or_else(|e| e.to_string(), |s| s.to_string())
            );
            return;
        }
        for (case, _, refusal) in cases {
            let (output, max_rss_kb, cpu_seconds) = measured_child(case);
            let stdout = String::from_utf8_lossy(&output.stdout);
            let figures = format!(
                "{case}: {:?}, peak RSS {max_rss_kb} KB, {cpu_seconds:.2} s CPU",
                output.status
            );
            eprintln!("{figures}");
            assert!(output.status.success(), "{figures}; stdout: {stdout}");
            assert!(stdout.contains("healthCheckExprs[0].current: "), "{stdout}");
            assert!(stdout.contains(refusal), "{stdout}");
            assert!(max_rss_kb < 150 * 1024, "{figures}");
            assert!(cpu_seconds < 3.0, "{figures}");
        }
    }

    /// Runs this test alone in a child with `CHILD_CASE=case`, under GNU time and ulimits of
    /// 20 s CPU and 4 GB of address space: its output, peak RSS in KB and CPU seconds.
    fn measured_child(case: &str) -> (std::process::Output, u64, f64) {
        let report = tempfile::NamedTempFile::new().unwrap();
        let test = "health::cel::meter::tests::hostile_expressions_are_refused_in_little_memory_and_cpu";
        let output = Command::new("/usr/bin/time")
            .args(["-f", "%M %U %S", "-o"])
            .arg(report.path())
            .args(["sh", "-c", "ulimit -t 20; ulimit -v 4000000; exec \"$@\"", "sh"])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD_CASE, case)
            .output()
            .expect("GNU time (/usr/bin/time, Debian package `time`) runs the child");
        let report = std::fs::read_to_string(report.path()).unwrap();
        // A killed child adds a "Command terminated by signal" line before the figures.
        let figures: Vec<f64> = report
            .lines()
            .last()
            .unwrap_or_default()
            .split(' ')
            .map(|n| {
                n.parse()
                    .unwrap_or_else(|_| panic!("unexpected GNU time report: {report}"))
            })
            .collect();
        let [rss, user, system] = figures[..] else {
            panic!("unexpected GNU time report: {report}")
        };
        (output, rss as u64, user + system)
    }
}
