//! The registry client against a real registry (CNCF distribution 2.8): tags listed with and
//! without credentials, over TLS with the registry's own CA, pages followed through `Link`,
//! manifest digests, and each failure's message.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use image_reflector::registry::{
    Credentials, ImageRef, Limits, Proxy, RegistryClient, RegistryError, TlsOptions,
};
use support::paging::{LinkStyle, PagingFront};
use support::token::{TokenRequest, TokenServer};
use test_support::registry::{Options, Registry};
use tokio::time::Instant;

const USER: &str = "alice";
const PASSWORD: &str = "wonderland";

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

fn client() -> RegistryClient {
    RegistryClient::new(&TlsOptions::default(), Limits::default()).unwrap()
}

fn credentials(password: &str) -> Credentials {
    Credentials {
        username: USER.into(),
        password: password.into(),
    }
}

fn set(tags: &[&str]) -> BTreeSet<String> {
    tags.iter().map(|t| t.to_string()).collect()
}

#[tokio::test]
async fn lists_tags_anonymously_over_plain_http() {
    let registry = Registry::start(Options::default());
    let tags = ["0.1.0", "0.1.1", "0.2.0", "1.0.0", "1.1.0", "1.1.0-alpha"];
    registry.push("team/app", &tags);
    let image = ImageRef::parse(&format!("{}/team/app", registry.host()), false).unwrap();
    let listed = client().list_tags(&image, None, deadline()).await.unwrap();
    assert_eq!(listed.len(), tags.len());
    assert_eq!(listed.into_iter().collect::<BTreeSet<_>>(), set(&tags));
}

#[tokio::test]
async fn basic_auth_401_without_credentials_and_tags_with_them() {
    let registry = Registry::start(Options {
        htpasswd: Some((USER, PASSWORD)),
        ..Options::default()
    });
    registry.push("private/app", &["1.0.0", "2.0.0"]);
    let image = ImageRef::parse(&format!("{}/private/app", registry.host()), false).unwrap();
    let client = client();

    let anonymous = client.list_tags(&image, None, deadline()).await.unwrap_err();
    assert_eq!(anonymous.status(), Some(401), "{anonymous}");
    assert_eq!(
        anonymous.to_string(),
        format!(
            "GET http://{}/v2/private/app/tags/list?n=1000: UNAUTHORIZED: authentication required; \
             [map[Action:pull Class: Name:private/app Type:repository]]",
            registry.host()
        )
    );
    assert!(!anonymous.is_terminal());

    let wrong = client
        .list_tags(&image, Some(&credentials("not-the-password")), deadline())
        .await
        .unwrap_err();
    assert_eq!(wrong.status(), Some(401), "{wrong}");
    assert!(!wrong.to_string().contains("not-the-password"), "{wrong}");

    let listed = client
        .list_tags(&image, Some(&credentials(PASSWORD)), deadline())
        .await
        .unwrap();
    assert_eq!(
        listed.into_iter().collect::<BTreeSet<_>>(),
        set(&["1.0.0", "2.0.0"])
    );
}

#[tokio::test]
async fn bearer_tokens_from_the_challenge_realm() {
    // Tags pushed without auth, then the same storage served behind a token service.
    let open = Registry::start(Options::default());
    let pushed = open.push("bearer/app", &["1.0.0", "1.1.0"]);
    let tokens = TokenServer::start(USER, PASSWORD).await;
    let registry = open.restart(Options {
        token: Some((tokens.realm(), tokens.cert())),
        ..Options::default()
    });
    let image = ImageRef::parse(&format!("{}/bearer/app", registry.host()), false).unwrap();
    let client = client();
    let auth = credentials(PASSWORD);

    let listed = client.list_tags(&image, Some(&auth), deadline()).await.unwrap();
    assert_eq!(
        listed.into_iter().collect::<BTreeSet<_>>(),
        set(&["1.0.0", "1.1.0"])
    );
    let digest = client
        .manifest_digest(&image, "1.1.0", Some(&auth), deadline())
        .await
        .unwrap();
    assert_eq!(digest, pushed[1].1);
    let asked = TokenRequest {
        scopes: vec!["repository:bearer/app:pull".into()],
        service: Some("test-registry".into()),
        user: Some(USER.into()),
    };
    assert_eq!(*tokens.requests.lock().unwrap(), [asked.clone(), asked]);

    // Anonymous: a token that grants nothing, refused by the registry.
    let anonymous = client.list_tags(&image, None, deadline()).await.unwrap_err();
    assert_eq!(anonymous.status(), Some(401), "{anonymous}");
    assert!(
        anonymous.to_string().starts_with(&format!(
            "GET http://{}/v2/bearer/app/tags/list?n=1000: UNAUTHORIZED: ",
            registry.host()
        )),
        "{anonymous}"
    );

    // Wrong credentials: the token service's answer, naming its URL.
    let wrong = client
        .list_tags(&image, Some(&credentials("nope")), deadline())
        .await
        .unwrap_err();
    assert_eq!(
        wrong.to_string(),
        format!(
            "GET {}?scope=repository%3Abearer%2Fapp%3Apull&service=test-registry: \
             UNAUTHORIZED: invalid username or password",
            tokens.realm()
        )
    );
}

#[tokio::test]
async fn tls_with_the_registry_ca_and_a_certificate_error_without_it() {
    let registry = Registry::start(Options {
        htpasswd: Some((USER, PASSWORD)),
        tls: true,
        ..Options::default()
    });
    registry.push("secure/app", &["1.0.0"]);
    let image = ImageRef::parse(&format!("{}/secure/app", registry.host()), false).unwrap();

    let untrusted = client()
        .list_tags(&image, Some(&credentials(PASSWORD)), deadline())
        .await
        .unwrap_err();
    let message = untrusted.to_string();
    assert!(matches!(untrusted, RegistryError::Transport { .. }), "{message}");
    assert!(
        message.starts_with(&format!("GET https://{}/v2/: ", registry.host())),
        "{message}"
    );
    assert!(message.contains("UnknownIssuer"), "{message}");

    let trusting = RegistryClient::new(
        &TlsOptions {
            ca_pem: Some(registry.ca_pem()),
            ..TlsOptions::default()
        },
        Limits::default(),
    )
    .unwrap();
    let listed = trusting
        .list_tags(&image, Some(&credentials(PASSWORD)), deadline())
        .await
        .unwrap();
    assert_eq!(listed, ["1.0.0"]);
}

#[tokio::test]
async fn mutual_tls_with_the_client_certificate_and_a_refusal_without_it() {
    let registry = Registry::start(Options {
        tls: true,
        mtls: true,
        ..Options::default()
    });
    registry.push("mutual/app", &["1.0.0"]);
    let image = ImageRef::parse(&format!("{}/mutual/app", registry.host()), false).unwrap();
    let (cert, key) = registry.client_pem();

    let no_cert = RegistryClient::new(
        &TlsOptions {
            ca_pem: Some(registry.ca_pem()),
            ..TlsOptions::default()
        },
        Limits::default(),
    )
    .unwrap();
    let err = no_cert.list_tags(&image, None, deadline()).await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, RegistryError::Transport { .. }), "{message}");
    assert!(
        message.starts_with(&format!("GET https://{}/v2/: ", registry.host())),
        "{message}"
    );
    // The server refuses the handshake (Go's distribution 2.8 sends bad_certificate).
    assert!(message.contains("received fatal alert"), "{message}");

    let with_cert = RegistryClient::new(
        &TlsOptions {
            ca_pem: Some(registry.ca_pem()),
            client_cert_pem: Some(cert.clone()),
            client_key_pem: Some(key),
        },
        Limits::default(),
    )
    .unwrap();
    let listed = with_cert.list_tags(&image, None, deadline()).await.unwrap();
    assert_eq!(listed, ["1.0.0"]);

    let half = RegistryClient::new(
        &TlsOptions {
            client_cert_pem: Some(cert),
            ..TlsOptions::default()
        },
        Limits::default(),
    )
    .err()
    .expect("a certificate without its key");
    assert_eq!(
        half.to_string(),
        "invalid TLS configuration: tls.crt and tls.key must be set together"
    );
    assert!(half.is_terminal());
}

#[tokio::test]
async fn manifest_digests_match_what_was_pushed() {
    let registry = Registry::start(Options {
        htpasswd: Some((USER, PASSWORD)),
        ..Options::default()
    });
    let pushed = registry.push("digests/app", &["1.0.0", "1.0.1"]);
    let image = ImageRef::parse(&format!("{}/digests/app", registry.host()), false).unwrap();
    let client = client();
    let auth = credentials(PASSWORD);
    for (tag, digest) in &pushed {
        let got = client
            .manifest_digest(&image, tag, Some(&auth), deadline())
            .await
            .unwrap();
        assert_eq!(&got, digest, "{tag}");
    }
    assert_ne!(pushed[0].1, pushed[1].1);

    // Re-pushed with other content: the tag's digest moves.
    let repushed = registry.push_salted("digests/app", "again", &["1.0.0"]);
    let got = client
        .manifest_digest(&image, "1.0.0", Some(&auth), deadline())
        .await
        .unwrap();
    assert_eq!(got, repushed[0].1);
    assert_ne!(got, pushed[0].1);

    let missing = client
        .manifest_digest(&image, "9.9.9", Some(&auth), deadline())
        .await
        .unwrap_err();
    assert_eq!(
        missing.to_string(),
        format!(
            "HEAD http://{}/v2/digests/app/manifests/9.9.9: unexpected status code 404 Not Found \
             (HEAD responses have no body, use GET for details)",
            registry.host()
        )
    );
    let bad = client
        .manifest_digest(&image, "../../x", Some(&auth), deadline())
        .await
        .unwrap_err();
    assert_eq!(bad.to_string(), "invalid tag '../../x'");
}

#[tokio::test]
async fn a_missing_repository_is_named_by_the_registry() {
    let registry = Registry::start(Options::default());
    let image = ImageRef::parse(&format!("{}/no/such-repo", registry.host()), false).unwrap();
    let err = client().list_tags(&image, None, deadline()).await.unwrap_err();
    assert_eq!(err.status(), Some(404));
    assert_eq!(
        err.to_string(),
        format!(
            "GET http://{}/v2/no/such-repo/tags/list?n=1000: NAME_UNKNOWN: repository name not known to \
             registry; map[name:no/such-repo]",
            registry.host()
        )
    );
}

fn paged(page_size: u32, max_pages: u32) -> RegistryClient {
    RegistryClient::new(
        &TlsOptions::default(),
        Limits {
            page_size,
            max_pages,
            ..Limits::default()
        },
    )
    .unwrap()
}

#[tokio::test]
async fn pages_are_followed_through_link_relative_and_absolute_with_port() {
    let registry = Registry::start(Options::default());
    let tags: Vec<String> = (0..25).map(|i| format!("1.{i}.0")).collect();
    let tag_refs: Vec<&str> = tags.iter().map(String::as_str).collect();
    registry.push("paged/app", &tag_refs);

    for style in [LinkStyle::Relative, LinkStyle::AbsoluteWithPort] {
        let front = PagingFront::start(registry.host(), style).await;
        let image = ImageRef::parse(&format!("127.0.0.1:{}/paged/app", front.port), false).unwrap();
        let listed = paged(10, 100).list_tags(&image, None, deadline()).await.unwrap();
        assert_eq!(listed.len(), 25, "{style:?}");
        assert_eq!(
            listed.into_iter().collect::<BTreeSet<_>>(),
            set(&tag_refs),
            "{style:?}"
        );
        // 10 + 10 + 5.
        assert_eq!(
            front.requests.load(std::sync::atomic::Ordering::SeqCst),
            3,
            "{style:?}"
        );
    }
}

#[tokio::test]
async fn a_link_to_another_host_or_an_endless_chain_fails_the_listing() {
    let registry = Registry::start(Options::default());
    registry.push("paged/app", &["a", "b", "c"]);

    let front = PagingFront::start(registry.host(), LinkStyle::CrossHost).await;
    let image = ImageRef::parse(&format!("127.0.0.1:{}/paged/app", front.port), false).unwrap();
    let err = paged(2, 100)
        .list_tags(&image, None, deadline())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "GET http://127.0.0.1:{port}/v2/paged/app/tags/list?n=2: Link to the next page leaves the \
             registry: http://localhost:{port}/v2/paged/app/tags/list?n=2&last=b is not on http://127.0.0.1:{port}",
            port = front.port
        )
    );
    assert_eq!(front.requests.load(std::sync::atomic::Ordering::SeqCst), 1);

    let front = PagingFront::start(registry.host(), LinkStyle::Endless).await;
    let image = ImageRef::parse(&format!("127.0.0.1:{}/paged/app", front.port), false).unwrap();
    let err = paged(2, 5).list_tags(&image, None, deadline()).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::TooManyPages { limit: 5, .. }),
        "{err}"
    );
    assert_eq!(front.requests.load(std::sync::atomic::Ordering::SeqCst), 5);
}

#[tokio::test]
async fn the_tag_budget_bounds_a_listing() {
    let registry = Registry::start(Options::default());
    registry.push("many/app", &["a", "b", "c", "d"]);
    let image = ImageRef::parse(&format!("{}/many/app", registry.host()), false).unwrap();
    let client = RegistryClient::new(
        &TlsOptions::default(),
        Limits {
            max_tags: 3,
            ..Limits::default()
        },
    )
    .unwrap();
    let err = client.list_tags(&image, None, deadline()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "GET http://{}/v2/many/app/tags/list?n=1000: more than 3 tags",
            registry.host()
        )
    );
}

#[tokio::test]
async fn a_silent_server_is_cut_off_at_the_deadline() {
    // Accepts connections and never answers: a hanging registry.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let image = ImageRef::parse(&format!("127.0.0.1:{port}/slow/app"), false).unwrap();
    let started = std::time::Instant::now();
    let err = client()
        .list_tags(&image, None, Instant::now() + Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, RegistryError::Timeout { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "GET https://127.0.0.1:{port}/v2/: timed out: the operation's deadline passed \
             (over plain HTTP: GET http://127.0.0.1:{port}/v2/: timed out: the operation's deadline passed)"
        )
    );
}

fn proxy_at(scheme: &str, port: u16, auth: Option<(&str, &str)>) -> Proxy {
    Proxy::parse(
        &format!("{scheme}://127.0.0.1:{port}"),
        auth.map(|(u, _)| u.to_string()),
        auth.map(|(_, p)| p.to_string()),
    )
    .unwrap()
}

fn proxied(tls: &TlsOptions, proxy: Proxy) -> RegistryClient {
    RegistryClient::with_proxy(tls, Some(proxy), Limits::default()).unwrap()
}

#[tokio::test]
async fn lists_tags_through_an_http_connect_proxy_that_demands_credentials() {
    let registry = Registry::start(Options {
        htpasswd: Some((USER, PASSWORD)),
        ..Options::default()
    });
    registry.push("proxied/app", &["1.0.0", "2.0.0"]);
    let image = ImageRef::parse(&format!("{}/proxied/app", registry.host()), false).unwrap();
    let proxy = support::proxy::Proxy::start(Some(("squid", "ink")));

    let wrong = proxied(
        &TlsOptions::default(),
        proxy_at("http", proxy.port, Some(("squid", "x"))),
    );
    let error = wrong
        .list_tags(&image, Some(&credentials(PASSWORD)), deadline())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("proxy http://127.0.0.1:{}", proxy.port)),
        "{error}"
    );
    assert!(
        error.to_lowercase().contains("proxy authorization required"),
        "{error}"
    );
    assert!(proxy.tunnels().is_empty(), "{:?}", proxy.tunnels());

    let right = proxied(
        &TlsOptions::default(),
        proxy_at("http", proxy.port, Some(("squid", "ink"))),
    );
    let listed = right
        .list_tags(&image, Some(&credentials(PASSWORD)), deadline())
        .await
        .unwrap();
    assert_eq!(
        listed.into_iter().collect::<BTreeSet<_>>(),
        set(&["1.0.0", "2.0.0"])
    );
    let through = format!("CONNECT {}", registry.host());
    assert!(proxy.tunnels().contains(&through), "{:?}", proxy.tunnels());
}

#[tokio::test]
async fn tls_to_the_registry_runs_inside_the_tunnel() {
    let registry = Registry::start(Options {
        tls: true,
        ..Options::default()
    });
    registry.push("secure/app", &["1.0.0"]);
    let image = ImageRef::parse(&format!("{}/secure/app", registry.host()), false).unwrap();
    let proxy = support::proxy::Proxy::start(None);
    let tls = TlsOptions {
        ca_pem: Some(registry.ca_pem()),
        ..TlsOptions::default()
    };
    let listed = proxied(&tls, proxy_at("http", proxy.port, None))
        .list_tags(&image, None, deadline())
        .await
        .unwrap();
    assert_eq!(listed, ["1.0.0"]);
    // The ping and the listing may each open one; every one goes to the registry.
    let tunnels = proxy.tunnels();
    assert!(!tunnels.is_empty());
    assert!(
        tunnels
            .iter()
            .all(|t| *t == format!("CONNECT {}", registry.host())),
        "{tunnels:?}"
    );
}

#[tokio::test]
async fn lists_tags_through_a_socks5_proxy_with_username_and_password() {
    let registry = Registry::start(Options::default());
    registry.push("socks/app", &["0.1.0", "0.2.0", "0.3.0"]);
    let image = ImageRef::parse(&format!("{}/socks/app", registry.host()), false).unwrap();
    let proxy = support::proxy::Proxy::start(Some(("sock", "puppet")));

    let wrong = proxied(
        &TlsOptions::default(),
        proxy_at("socks5", proxy.port, Some(("sock", "x"))),
    );
    let error = wrong
        .list_tags(&image, None, deadline())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("proxy socks5://127.0.0.1:{}", proxy.port)),
        "{error}"
    );
    assert!(proxy.tunnels().is_empty(), "{:?}", proxy.tunnels());

    let right = proxied(
        &TlsOptions::default(),
        proxy_at("socks5", proxy.port, Some(("sock", "puppet"))),
    );
    let listed = right.list_tags(&image, None, deadline()).await.unwrap();
    assert_eq!(listed.len(), 3);
    let through = format!("SOCKS5 {}", registry.host());
    assert!(proxy.tunnels().contains(&through), "{:?}", proxy.tunnels());
}

#[tokio::test]
async fn an_unreachable_proxy_fails_the_scan_naming_it() {
    let registry = Registry::start(Options::default());
    registry.push("lost/app", &["1.0.0"]);
    let image = ImageRef::parse(&format!("{}/lost/app", registry.host()), false).unwrap();
    // A port nothing listens on: the registry itself is never dialled.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = proxied(&TlsOptions::default(), proxy_at("http", port, None))
        .list_tags(&image, None, deadline())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("proxy http://127.0.0.1:{port}")),
        "{error}"
    );
}
