//! Repeats of an identical event become a count on the first one, as client-go's event
//! correlator (which Flux's recorder uses) does: an event with the same regarding object, type,
//! reason, note and reporting controller as one already written is not a new Event object but
//! a raised count on it. Through the events.k8s.io API the count is the event's `series`
//! (count and last observed time), the only part of a written event that API lets change.
//!
//! What is remembered is bounded (the least recently seen key is forgotten first) and lives as
//! long as the process, like client-go's cache.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::events::v1::{Event as KubeEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// Keys remembered, as client-go's default cache size.
pub(crate) const REMEMBERED: usize = 4096;

/// What to write for an observed event.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Write {
    /// A new Event object.
    Create(KubeEvent),
    /// A repeat: raise the series of the Event of this name. The event is the whole object with
    /// that name and series, to create instead when the first one is gone (events expire).
    Repeat(KubeEvent),
}

impl Write {
    /// The name of the Event object written: the same for a first event and its repeats.
    pub(crate) fn name(&self) -> &str {
        let (Self::Create(event) | Self::Repeat(event)) = self;
        event.metadata.name.as_deref().unwrap_or_default()
    }
}

/// The first Event of a key and how often it has been seen.
struct Seen {
    name: String,
    count: i32,
    /// When it was last seen, in the order of observations (for forgetting the oldest).
    tick: u64,
}

/// Remembers the events written, by key, up to `capacity` keys.
pub(crate) struct Correlator {
    capacity: usize,
    seen: HashMap<String, Seen>,
    /// Keys by the tick they were last seen at: the first is the least recently seen.
    order: BTreeMap<u64, String>,
    tick: u64,
}

impl Correlator {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            seen: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
        }
    }

    /// What to write for `event`, observed at `now`: the event itself when its key is new, a
    /// repeat of the first Event of its key otherwise.
    pub(crate) fn observe(&mut self, mut event: KubeEvent, now: Timestamp) -> Write {
        let key = key(&event);
        self.tick += 1;
        let tick = self.tick;
        if let Some(seen) = self.seen.get_mut(&key) {
            self.order.remove(&seen.tick);
            self.order.insert(tick, key);
            seen.tick = tick;
            seen.count = seen.count.saturating_add(1);
            event.metadata.name = Some(seen.name.clone());
            event.series = Some(EventSeries {
                count: seen.count,
                last_observed_time: MicroTime(now),
            });
            return Write::Repeat(event);
        }
        if self.seen.len() >= self.capacity
            && let Some((_, oldest)) = self.order.pop_first()
        {
            self.seen.remove(&oldest);
        }
        let name = event.metadata.name.clone().unwrap_or_default();
        self.order.insert(tick, key.clone());
        self.seen.insert(key, Seen { name, count: 1, tick });
        Write::Create(event)
    }
}

/// What makes two events the same one, as client-go's key: the regarding object (without its
/// resourceVersion, which changes with every status write), type, reason, note and who reports.
/// Annotations, action and related object are not part of it: a repeat keeps the first's.
fn key(event: &KubeEvent) -> String {
    let regarding = event.regarding.clone().unwrap_or_default();
    let parts = [
        event.reporting_controller.as_deref(),
        event.reporting_instance.as_deref(),
        regarding.kind.as_deref(),
        regarding.namespace.as_deref(),
        regarding.name.as_deref(),
        regarding.field_path.as_deref(),
        regarding.uid.as_deref(),
        regarding.api_version.as_deref(),
        event.type_.as_deref(),
        event.reason.as_deref(),
        event.note.as_deref(),
    ];
    // Lengths first, so that no two different field lists join to the same key.
    parts
        .iter()
        .map(|part| {
            let part = part.unwrap_or_default();
            format!("{}:{part}", part.len())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn event(name: &str, object: &str, reason: &str, note: &str) -> KubeEvent {
        KubeEvent {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some("apps".to_string()),
                ..ObjectMeta::default()
            },
            regarding: Some(ObjectReference {
                kind: Some("Kustomization".to_string()),
                namespace: Some("apps".to_string()),
                name: Some(object.to_string()),
                uid: Some(format!("uid-{object}")),
                resource_version: Some(name.to_string()),
                ..ObjectReference::default()
            }),
            type_: Some("Warning".to_string()),
            reason: Some(reason.to_string()),
            note: Some(note.to_string()),
            reporting_controller: Some("kustomize-controller".to_string()),
            reporting_instance: Some("kc-0".to_string()),
            ..KubeEvent::default()
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn series(write: &Write) -> Option<(i32, Timestamp)> {
        let (Write::Create(event) | Write::Repeat(event)) = write;
        event.series.as_ref().map(|s| (s.count, s.last_observed_time.0))
    }

    #[test]
    fn an_identical_event_raises_the_count_of_the_first() {
        let mut correlator = Correlator::new(REMEMBERED);
        let first = correlator.observe(event("app.1", "app", "Failed", "boom"), at(0));
        assert_eq!(first, Write::Create(event("app.1", "app", "Failed", "boom")));
        // Later repeats carry new names and resourceVersions; they still count on `app.1`.
        let second = correlator.observe(event("app.2", "app", "Failed", "boom"), at(5));
        assert!(matches!(second, Write::Repeat(_)), "{second:?}");
        assert_eq!(second.name(), "app.1");
        assert_eq!(series(&second), Some((2, at(5))));
        let third = correlator.observe(event("app.3", "app", "Failed", "boom"), at(9));
        assert_eq!((third.name(), series(&third)), ("app.1", Some((3, at(9)))));
    }

    #[test]
    fn an_event_that_differs_in_any_keyed_field_is_new() {
        let mut correlator = Correlator::new(REMEMBERED);
        correlator.observe(event("a.1", "app", "Failed", "boom"), at(0));
        let mut normal = event("a.5", "app", "Failed", "boom");
        normal.type_ = Some("Normal".to_string());
        let mut other_uid = event("a.6", "app", "Failed", "boom");
        other_uid.regarding.as_mut().unwrap().uid = Some("recreated".to_string());
        let mut other_reporter = event("a.7", "app", "Failed", "boom");
        other_reporter.reporting_controller = Some("image-reflector-controller".to_string());
        let different = [
            event("a.2", "app", "Failed", "bang"),
            event("a.3", "app", "Progressing", "boom"),
            event("a.4", "web", "Failed", "boom"),
            normal,
            other_uid,
            other_reporter,
        ];
        for e in different {
            let write = correlator.observe(e.clone(), at(1));
            assert_eq!(write, Write::Create(e));
        }
    }

    #[test]
    fn fields_are_not_confused_across_their_boundaries() {
        let mut correlator = Correlator::new(REMEMBERED);
        correlator.observe(event("a.1", "app", "Fail", "edboom"), at(0));
        let write = correlator.observe(event("a.2", "app", "Failed", "boom"), at(1));
        assert!(matches!(write, Write::Create(_)), "{write:?}");
    }

    #[test]
    fn the_least_recently_seen_key_is_forgotten_when_full() {
        let mut correlator = Correlator::new(2);
        correlator.observe(event("a.1", "a", "R", "m"), at(0));
        correlator.observe(event("b.1", "b", "R", "m"), at(1));
        // Seeing `a` again makes `b` the oldest.
        let repeat = correlator.observe(event("a.2", "a", "R", "m"), at(2));
        assert_eq!(repeat.name(), "a.1");
        correlator.observe(event("c.1", "c", "R", "m"), at(3));
        assert_eq!(correlator.seen.len(), 2);
        assert_eq!(correlator.order.len(), 2);
        let b = correlator.observe(event("b.2", "b", "R", "m"), at(4));
        assert_eq!(b, Write::Create(event("b.2", "b", "R", "m")));
        // Adding `b` back forgot `a` (seen at 2, before `c` at 3).
        let c = correlator.observe(event("c.2", "c", "R", "m"), at(5));
        assert_eq!((c.name(), series(&c)), ("c.1", Some((2, at(5)))));
        let a = correlator.observe(event("a.3", "a", "R", "m"), at(6));
        assert!(matches!(a, Write::Create(_)), "{a:?}");
    }
}
