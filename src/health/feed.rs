//! Shared watches of awaited objects: one watch per kind and namespace for every health wait of
//! one identity, not one per wait. A thousand Kustomizations waiting for their Deployments in a
//! namespace hold one connection to the API server instead of a thousand, and each wait costs a
//! read of its own objects instead of a LIST and a WATCH.
//!
//! A feed keeps only the objects some wait names, as last seen, and passes every change of them
//! to the waits that name them. A name first asked for while the feed's first list is still to
//! come is answered by that list; asked for later, it is read once (a GET, or one LIST for several
//! names), and from then on the watch keeps it current. A feed stops [`LINGER`] after its last
//! wait ended, unless another wait came meanwhile: waits that follow each other (a fleet
//! reconciled four at a time) keep one watch instead of listing the namespace for each.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_runtime::task::OwnedTask;
use futures::StreamExt;
use futures::channel::mpsc;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::watcher;

use crate::kube_ext::ResourceResolver;

/// Longest pause between two reads of an object whose read failed.
const READ_RETRY_MAX: Duration = Duration::from_secs(30);

/// How long a feed without waits keeps watching.
const LINGER: Duration = Duration::from_secs(30);

/// Objects per page of a feed's lists: a namespace of a thousand Deployments is read a page at
/// a time, and each page is held whole while it is read.
const PAGE: u32 = 100;

/// What a wait hears about the objects it named.
#[derive(Clone, Debug)]
pub(crate) enum Update {
    /// The object as it is now.
    Seen(Arc<DynamicObject>),
    /// The object named so does not exist.
    Gone(String),
    /// The watch or a read failed; the objects not read yet stay unknown, with this error.
    Failed(String),
}

/// The health watches of one identity's client, shared by all its waits. Cheap to clone.
#[derive(Clone)]
pub struct HealthWatches {
    resolver: ResourceResolver,
    feeds: Feeds,
    linger: Duration,
}

type Feeds = Arc<Mutex<HashMap<String, Arc<Feed>>>>;

impl HealthWatches {
    pub fn new(resolver: ResourceResolver) -> Self {
        Self {
            resolver,
            feeds: Arc::default(),
            linger: LINGER,
        }
    }

    /// Feeds stop this long after their last wait (tests).
    pub fn with_linger(self, linger: Duration) -> Self {
        Self { linger, ..self }
    }

    pub fn resolver(&self) -> &ResourceResolver {
        &self.resolver
    }

    /// Watches running now.
    pub fn running(&self) -> usize {
        self.feeds.lock().expect("health feeds lock").len()
    }

    /// Subscribes to `names` of the objects `api` serves (one kind in one namespace, or a
    /// cluster-scoped kind): every name gets a first [`Update`] and then each change.
    pub(crate) fn subscribe(&self, api: Api<DynamicObject>, names: Vec<String>) -> Subscription {
        let key = api.resource_url().to_string();
        let feed = self
            .feeds
            .lock()
            .expect("health feeds lock")
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Feed::start(api.clone())))
            .clone();
        let (sender, updates) = mpsc::unbounded();
        let (id, unread) = feed.state().subscribe(&names, sender.clone());
        let reads = (!unread.is_empty())
            .then(|| OwnedTask(tokio::spawn(read(api, unread, feed.shared.clone(), sender))));
        Subscription {
            updates: Some(updates),
            _registration: Registration {
                feeds: self.feeds.clone(),
                key,
                feed,
                id,
                names,
                linger: self.linger,
            },
            _reads: reads,
        }
    }
}

/// A wait's subscription: its updates, until it is dropped.
pub(crate) struct Subscription {
    updates: Option<mpsc::UnboundedReceiver<Update>>,
    _registration: Registration,
    _reads: Option<OwnedTask>,
}

impl Subscription {
    /// The updates, once; the subscription must be kept as long as they are read.
    pub(crate) fn updates(&mut self) -> mpsc::UnboundedReceiver<Update> {
        self.updates.take().expect("updates taken once")
    }
}

struct Registration {
    feeds: Feeds,
    key: String,
    feed: Arc<Feed>,
    id: u64,
    names: Vec<String>,
    linger: Duration,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if !self.feed.state().unsubscribe(self.id, &self.names) {
            return;
        }
        let (feeds, key, feed, linger) = (
            self.feeds.clone(),
            self.key.clone(),
            self.feed.clone(),
            self.linger,
        );
        let stop_if_idle = move || {
            let mut feeds = feeds.lock().expect("health feeds lock");
            let current = feeds.get(&key).is_some_and(|f| Arc::ptr_eq(f, &feed));
            if current && feed.state().subscribers.is_empty() {
                feeds.remove(&key);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep(linger).await;
                    stop_if_idle();
                });
            }
            Err(_) => stop_if_idle(),
        }
    }
}

/// One watch and what it knows; the watch stops when the last subscription lets go.
struct Feed {
    shared: Arc<Mutex<FeedState>>,
    _watch: OwnedTask,
}

impl Feed {
    fn start(api: Api<DynamicObject>) -> Self {
        let shared = Arc::new(Mutex::new(FeedState::default()));
        let state = shared.clone();
        let watch = tokio::spawn(async move {
            let mut events =
                flux_runtime::watch_retry::with_backoff(watcher(api, flux_runtime::watch_retry::config()))
                    .boxed();
            while let Some(event) = events.next().await {
                state.lock().expect("health feed lock").on_event(event);
            }
        });
        Self {
            shared,
            _watch: OwnedTask(watch),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FeedState> {
        self.shared.lock().expect("health feed lock")
    }
}

/// Reads `names` once (one GET, or one LIST for several) and offers what it found to the feed;
/// a failed read is told to `sender` and tried again.
async fn read(
    api: Api<DynamicObject>,
    names: Vec<String>,
    shared: Arc<Mutex<FeedState>>,
    sender: mpsc::UnboundedSender<Update>,
) {
    let mut pause = Duration::from_secs(1);
    loop {
        let found = if let [name] = names.as_slice() {
            api.get_opt(name).await.map(|o| o.into_iter().collect::<Vec<_>>())
        } else {
            list_all(&api).await
        };
        match found {
            Ok(objects) => {
                let mut state = shared.lock().expect("health feed lock");
                let wanted: HashSet<&String> = names.iter().collect();
                let mut listed = HashSet::new();
                for object in objects {
                    let name = object.metadata.name.clone().unwrap_or_default();
                    if wanted.contains(&name) {
                        listed.insert(name.clone());
                        state.offer(&name, Some(object));
                    }
                }
                for name in names.iter().filter(|n| !listed.contains(*n)) {
                    state.offer(name, None);
                }
                return;
            }
            Err(e) => {
                let _ = sender.unbounded_send(Update::Failed(format!("read failed: {e}")));
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(READ_RETRY_MAX);
            }
        }
    }
}

/// Every object `api` serves, page by page.
async fn list_all(api: &Api<DynamicObject>) -> Result<Vec<DynamicObject>, kube::Error> {
    let mut params = ListParams::default().limit(PAGE);
    let mut objects = Vec::new();
    loop {
        let page = api.list(&params).await?;
        objects.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(objects),
        }
    }
}

#[derive(Default)]
struct FeedState {
    /// Lists begun by the watch (its first, and each relist).
    lists: u64,
    /// Names seen by the list in progress.
    listing: HashSet<String>,
    watched: HashMap<String, Watched>,
    subscribers: HashMap<u64, mpsc::UnboundedSender<Update>>,
    next_id: u64,
}

/// A name some wait asked for.
struct Watched {
    subscribers: Vec<u64>,
    /// `lists` when it was first asked for: a list begun later answers for it.
    asked_during: u64,
    /// `None` until known; then the object, or `None` for absent.
    state: Option<Option<Arc<DynamicObject>>>,
}

impl FeedState {
    /// Registers `sender` for `names`, tells it what is known already, and returns its id and
    /// the names that need a read: those no list begun after they were asked for will answer.
    fn subscribe(&mut self, names: &[String], sender: mpsc::UnboundedSender<Update>) -> (u64, Vec<String>) {
        let id = self.next_id;
        self.next_id += 1;
        let mut unread = Vec::new();
        for name in names {
            let watched = self.watched.entry(name.clone()).or_insert_with(|| Watched {
                subscribers: Vec::new(),
                asked_during: self.lists,
                state: None,
            });
            watched.subscribers.push(id);
            match &watched.state {
                Some(state) => {
                    let _ = sender.unbounded_send(update(name, state));
                }
                None if self.lists > 0 => unread.push(name.clone()),
                None => {}
            }
        }
        self.subscribers.insert(id, sender);
        (id, unread)
    }

    /// Forgets subscriber `id`; returns whether no subscriber is left.
    fn unsubscribe(&mut self, id: u64, names: &[String]) -> bool {
        self.subscribers.remove(&id);
        for name in names {
            if let Some(watched) = self.watched.get_mut(name) {
                watched.subscribers.retain(|s| *s != id);
                if watched.subscribers.is_empty() {
                    self.watched.remove(name);
                }
            }
        }
        self.subscribers.is_empty()
    }

    fn on_event(&mut self, event: Result<watcher::Event<DynamicObject>, watcher::Error>) {
        match event {
            Ok(watcher::Event::Init) => {
                self.lists += 1;
                self.listing.clear();
            }
            Ok(watcher::Event::InitApply(object)) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                self.set(&name, Some(object));
                self.listing.insert(name);
            }
            Ok(watcher::Event::InitDone) => {
                let absent: Vec<String> = self
                    .watched
                    .iter()
                    .filter(|(name, w)| w.asked_during < self.lists && !self.listing.contains(*name))
                    .map(|(name, _)| name.clone())
                    .collect();
                for name in absent {
                    self.set(&name, None);
                }
                self.listing = HashSet::new();
            }
            Ok(watcher::Event::Apply(object)) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                self.set(&name, Some(object));
            }
            Ok(watcher::Event::Delete(object)) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                self.set(&name, None);
            }
            Err(e) => {
                // The watcher retries with backoff; waits keep the error for their report.
                let message = format!("watch failed: {e}");
                for sender in self.subscribers.values() {
                    let _ = sender.unbounded_send(Update::Failed(message.clone()));
                }
            }
        }
    }

    /// What the watch saw of `name`, passed on when some wait asked for it.
    fn set(&mut self, name: &str, state: Option<DynamicObject>) {
        let Some(watched) = self.watched.get_mut(name) else {
            return;
        };
        // Health is judged from the spec and status; managedFields are most of a small
        // object's size, and kept once per awaited object.
        let state = state.map(|mut object| {
            object.metadata.managed_fields = None;
            Arc::new(object)
        });
        let stale = match (&watched.state, &state) {
            (Some(Some(known)), Some(seen)) => older(seen, known),
            _ => false,
        };
        if stale {
            return;
        }
        let message = update(name, &state);
        watched.state = Some(state);
        for id in &watched.subscribers {
            if let Some(sender) = self.subscribers.get(id) {
                let _ = sender.unbounded_send(message.clone());
            }
        }
    }

    /// What a read found: it tells only what the watch has not told already (an absence read
    /// before the object appeared is old news).
    fn offer(&mut self, name: &str, found: Option<DynamicObject>) {
        let known = self.watched.get(name).and_then(|w| w.state.as_ref());
        match (known, &found) {
            (None, _) | (Some(Some(_)), Some(_)) => self.set(name, found),
            _ => {}
        }
    }
}

fn update(name: &str, state: &Option<Arc<DynamicObject>>) -> Update {
    match state {
        Some(object) => Update::Seen(object.clone()),
        None => Update::Gone(name.to_string()),
    }
}

/// Whether `seen` is an older state of the object than `known`. Resource versions are etcd
/// revisions on every API server this controller talks to; one that is not a number is taken as
/// news.
fn older(seen: &DynamicObject, known: &DynamicObject) -> bool {
    let version = |o: &DynamicObject| o.metadata.resource_version.as_deref()?.parse::<u64>().ok();
    matches!((version(seen), version(known)), (Some(s), Some(k)) if s < k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc::UnboundedReceiver;
    use kube::api::ObjectMeta;

    fn object(name: &str, version: u64) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(version.to_string()),
                ..ObjectMeta::default()
            },
            data: serde_json::Value::Null,
        }
    }

    /// What the receiver has been told so far, as `name@version` or `name gone`.
    fn told(receiver: &mut UnboundedReceiver<Update>) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(update) = receiver.try_recv() {
            seen.push(match update {
                Update::Seen(o) => format!(
                    "{}@{}",
                    o.metadata.name.as_deref().unwrap(),
                    o.metadata.resource_version.as_deref().unwrap()
                ),
                Update::Gone(name) => format!("{name} gone"),
                Update::Failed(e) => format!("failed: {e}"),
            });
        }
        seen
    }

    fn subscribe(state: &mut FeedState, names: &[&str]) -> (u64, Vec<String>, UnboundedReceiver<Update>) {
        let (sender, receiver) = mpsc::unbounded();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let (id, unread) = state.subscribe(&names, sender);
        (id, unread, receiver)
    }

    #[test]
    fn names_asked_before_the_first_list_are_answered_by_it_absent_ones_too() {
        let mut state = FeedState::default();
        let (_, unread, mut updates) = subscribe(&mut state, &["web", "db"]);
        assert!(unread.is_empty(), "the first list will answer");
        state.on_event(Ok(watcher::Event::Init));
        state.on_event(Ok(watcher::Event::InitApply(object("other", 3))));
        state.on_event(Ok(watcher::Event::InitApply(object("web", 4))));
        state.on_event(Ok(watcher::Event::InitDone));
        assert_eq!(told(&mut updates), ["web@4", "db gone"]);
        state.on_event(Ok(watcher::Event::Apply(object("web", 7))));
        state.on_event(Ok(watcher::Event::Apply(object("other", 8))));
        assert_eq!(told(&mut updates), ["web@7"]);
    }

    #[test]
    fn a_name_asked_after_the_list_began_is_read_and_not_declared_absent_by_that_list() {
        let mut state = FeedState::default();
        let (_, _, _first) = subscribe(&mut state, &["web"]);
        state.on_event(Ok(watcher::Event::Init));
        state.on_event(Ok(watcher::Event::InitApply(object("db", 2))));
        let (_, unread, mut updates) = subscribe(&mut state, &["db"]);
        assert_eq!(unread, ["db"], "listed before it was asked for: read it");
        state.on_event(Ok(watcher::Event::InitDone));
        assert!(told(&mut updates).is_empty(), "not absent: listed before the ask");
        state.offer("db", Some(object("db", 2)));
        assert_eq!(told(&mut updates), ["db@2"]);
    }

    #[test]
    fn a_second_wait_hears_the_known_state_at_once_and_a_read_never_rolls_it_back() {
        let mut state = FeedState::default();
        let (_, _, _first) = subscribe(&mut state, &["web"]);
        state.on_event(Ok(watcher::Event::Init));
        state.on_event(Ok(watcher::Event::InitDone));
        state.on_event(Ok(watcher::Event::Apply(object("web", 9))));
        let (_, unread, mut second) = subscribe(&mut state, &["web"]);
        assert!(unread.is_empty(), "known already");
        assert_eq!(told(&mut second), ["web@9"]);
        state.offer("web", Some(object("web", 5)));
        state.offer("web", None);
        state.on_event(Ok(watcher::Event::Apply(object("web", 8))));
        assert!(told(&mut second).is_empty(), "older news is dropped");
        state.on_event(Ok(watcher::Event::Delete(object("web", 10))));
        assert_eq!(told(&mut second), ["web gone"]);
    }

    #[test]
    fn a_name_no_wait_asks_for_any_more_is_forgotten() {
        let mut state = FeedState::default();
        let (first, _, _a) = subscribe(&mut state, &["web"]);
        let (second, _, _b) = subscribe(&mut state, &["web", "db"]);
        assert!(!state.unsubscribe(first, &["web".into()]), "a subscriber is left");
        assert!(state.watched.contains_key("web"), "still asked for by the second");
        assert!(
            state.unsubscribe(second, &["web".into(), "db".into()]),
            "none left"
        );
        assert!(state.watched.is_empty());
        assert!(state.subscribers.is_empty());
    }

    #[test]
    fn a_watch_error_is_told_to_every_wait() {
        let mut state = FeedState::default();
        let (_, _, mut a) = subscribe(&mut state, &["web"]);
        let (_, _, mut b) = subscribe(&mut state, &["db"]);
        state.on_event(Err(watcher::Error::NoResourceVersion));
        assert_eq!(told(&mut a).len(), 1);
        assert_eq!(told(&mut b).len(), 1);
    }
}
