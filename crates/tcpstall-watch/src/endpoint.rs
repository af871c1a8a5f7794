//! The metrics endpoint: HTTP/1.1, or HTTPS with basic authentication from
//! `--web.config.file` ([`crate::web_config`]), served by hyper on a runtime of one
//! thread of its own (and at most one more for bcrypt).
//!
//! Everything a peer controls is bounded: the request head ([`HEAD_LIMIT`], answered
//! 431 past it), the time to send it or a TLS handshake ([`HEAD_TIMEOUT`], also how
//! long a connection may idle between requests), a connection's life
//! ([`CONNECTION_LIFETIME`]), and the connections open at once ([`MAX_CONNECTIONS`]: one
//! past it is closed at once, not queued). A failing accept(2) (out of file
//! descriptors, say) is counted and retried after a back-off; a listener that cannot
//! accept at all any more is reported through [`Exporter::failure`].
//!
//! Paths: `/metrics` (GET or HEAD, any query string; other methods 405) and
//! `/healthz` (200 `ok` while the event loop runs, 503 when it has not for
//! [`STALE_EVENT_LOOP`]); anything else 404. Basic authentication guards `/metrics`.

use std::convert::Infallible;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio_rustls::TlsAcceptor;

use crate::basic_auth::{BasicAuth, Check};
use crate::prometheus::{Metrics, ScrapeError, ScrapeErrors};
use crate::web_config::WebConfig;

/// Connections served at once; Prometheus needs one per server scraping.
pub const MAX_CONNECTIONS: usize = 64;
/// The most a request head may take (hyper's least read buffer).
pub const HEAD_LIMIT: usize = 8192;
/// The most header fields in a request.
const MAX_HEADER_FIELDS: usize = 32;
/// Time for a request head, from when the connection is ready for one (opened, or
/// its last response sent), and for a TLS handshake.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is asked to close after this (at once when idle), and dropped
/// [`HEAD_TIMEOUT`] later if it has not (a peer that does not read its response).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// `/healthz` answers 503 when the event loop has not run for this long.
pub const STALE_EVENT_LOOP: Duration = Duration::from_secs(10);
/// Back-off after a failed accept(2): doubling from the first to the last.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// Reads `--prometheus ADDR`: a bare port binds 127.0.0.1.
pub fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| format!("{text:?} is neither a port nor an address:port"))
}

/// When the event loop last ran, for `/healthz`.
#[derive(Debug)]
struct Heartbeat {
    since: Instant,
    last_ms: AtomicU64,
}

impl Heartbeat {
    fn beat(&self) {
        self.last_ms
            .store(self.since.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn alive(&self) -> bool {
        let now_ms = self.since.elapsed().as_millis() as u64;
        now_ms.saturating_sub(self.last_ms.load(Ordering::Relaxed))
            < STALE_EVENT_LOOP.as_millis() as u64
    }
}

/// What every connection reads.
struct Shared {
    metrics: Arc<Mutex<Metrics>>,
    errors: Arc<ScrapeErrors>,
    auth: Option<BasicAuth>,
    heartbeat: Heartbeat,
}

/// The HTTP endpoint, serving until dropped.
pub struct Exporter {
    pub address: SocketAddr,
    /// Whether it serves HTTPS.
    pub https: bool,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    failure: mpsc::Receiver<String>,
    thread: Option<JoinHandle<()>>,
}

impl Exporter {
    /// Binds `address` and serves.
    pub fn start(
        address: SocketAddr,
        metrics: Arc<Mutex<Metrics>>,
        config: WebConfig,
    ) -> Result<Exporter, String> {
        let listener =
            std::net::TcpListener::bind(address).map_err(|e| format!("{address}: {e}"))?;
        Exporter::serve(listener, metrics, config).map_err(|e| format!("{address}: {e}"))
    }

    /// Serves on a listening socket.
    pub fn serve(
        listener: std::net::TcpListener,
        metrics: Arc<Mutex<Metrics>>,
        config: WebConfig,
    ) -> Result<Exporter, String> {
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(1)
            .thread_name("tcpstall-auth")
            .build()
            .map_err(|e| e.to_string())?;
        let errors = metrics
            .lock()
            .map_err(|_| "the metrics are poisoned".to_string())?
            .scrape_errors();
        let shared = Arc::new(Shared {
            metrics,
            errors,
            auth: BasicAuth::new(config.users),
            heartbeat: Heartbeat {
                since: Instant::now(),
                last_ms: AtomicU64::new(0),
            },
        });
        let https = config.tls.is_some();
        let tls = config.tls.map(TlsAcceptor::from);
        let (stop, stopped) = oneshot::channel();
        let (failed, failure) = mpsc::channel();
        let serving = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tcpstall-http".into())
            .spawn(move || {
                let served = runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener).map_err(|e| e.to_string())?;
                    accept_loop(listener, tls, serving, stopped).await
                });
                if let Err(e) = served {
                    let _ = failed.send(e);
                }
                runtime.shutdown_background();
            })
            .map_err(|e| e.to_string())?;
        Ok(Exporter {
            address,
            https,
            shared,
            stop: Some(stop),
            failure,
            thread: Some(thread),
        })
    }

    /// Says that the event loop runs (for `/healthz`).
    pub fn heartbeat(&self) {
        self.shared.heartbeat.beat();
    }

    /// Why the endpoint stopped serving for good, once it has.
    pub fn failure(&self) -> Option<String> {
        self.failure.try_recv().ok()
    }

    /// Waits up to `limit` for the endpoint to fail.
    pub fn wait_failure(&self, limit: Duration) -> Option<String> {
        self.failure.recv_timeout(limit).ok()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts until stopped; an error only when the listener cannot accept any more.
async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    mut stopped: oneshot::Receiver<()>,
) -> Result<(), String> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = ACCEPT_BACKOFF.0;
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return Ok(()),
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                backoff = ACCEPT_BACKOFF.0;
                match Arc::clone(&slots).try_acquire_owned() {
                    Ok(slot) => {
                        tokio::spawn(connection(stream, tls.clone(), Arc::clone(&shared), slot));
                    }
                    Err(_) => {
                        shared.errors.count(ScrapeError::TooManyConnections);
                        drop(stream);
                    }
                }
            }
            Err(e) => {
                let error = match e.raw_os_error() {
                    Some(libc::EMFILE) => ScrapeError::AcceptEmfile,
                    Some(libc::ENFILE) => ScrapeError::AcceptEnfile,
                    Some(libc::ENOBUFS | libc::ENOMEM) => ScrapeError::AcceptNoMemory,
                    // The socket is not a listening one (any more): accept(2) cannot
                    // succeed again.
                    Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EOPNOTSUPP) => {
                        return Err(format!("accepting connections: {e}"));
                    }
                    _ => ScrapeError::AcceptOther,
                };
                shared.errors.count(error);
                tokio::select! {
                    _ = &mut stopped => return Ok(()),
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
            }
        }
    }
}

/// One connection: its TLS handshake, then HTTP; `_slot` is released when it ends.
async fn connection(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    _slot: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let Some(acceptor) = tls else {
        return serve_http(stream, shared).await;
    };
    match tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => serve_http(stream, shared).await,
        Ok(Err(_)) => shared.errors.count(ScrapeError::TlsHandshake),
        Err(_) => shared.errors.count(ScrapeError::Timeout),
    }
}

async fn serve_http<S>(stream: S, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let requests = Arc::new(AtomicU64::new(0));
    let service = {
        let shared = Arc::clone(&shared);
        let requests = Arc::clone(&requests);
        hyper::service::service_fn(move |request| {
            requests.fetch_add(1, Ordering::Relaxed);
            let shared = Arc::clone(&shared);
            async move { Ok::<_, Infallible>(respond(request, shared).await) }
        })
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(HEAD_LIMIT)
        .max_headers(MAX_HEADER_FIELDS);
    let mut connection = std::pin::pin!(http.serve_connection(TokioIo::new(stream), service));
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = tokio::time::sleep(CONNECTION_LIFETIME) => {
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(HEAD_TIMEOUT, connection.as_mut()).await {
                Ok(ended) => ended,
                Err(_) => {
                    shared.errors.count(ScrapeError::Timeout);
                    return;
                }
            }
        }
    };
    let Err(e) = ended else { return };
    if e.is_parse_too_large() {
        shared.errors.count(ScrapeError::HeaderTooLarge);
    } else if e.is_timeout() {
        // A connection idle after its requests is closed, not counted.
        if requests.load(Ordering::Relaxed) == 0 {
            shared.errors.count(ScrapeError::Timeout);
        }
    } else if e.is_parse() {
        shared.errors.count(ScrapeError::BadRequest);
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn method_not_allowed() -> Response<Full<Bytes>> {
    let mut response = text(
        StatusCode::METHOD_NOT_ALLOWED,
        "tcpstall watch: GET or HEAD\n",
    );
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    response
}

async fn respond(request: Request<Incoming>, shared: Arc<Shared>) -> Response<Full<Bytes>> {
    let readable = matches!(*request.method(), Method::GET | Method::HEAD);
    match request.uri().path() {
        "/metrics" => {
            if !authorized(&request, &shared).await {
                shared.errors.count(ScrapeError::Unauthorized);
                let mut response = text(StatusCode::UNAUTHORIZED, "tcpstall watch: unauthorized\n");
                response.headers_mut().insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"tcpstall\", charset=\"UTF-8\""),
                );
                return response;
            }
            if !readable {
                return method_not_allowed();
            }
            let Ok(body) = shared.metrics.lock().map(|m| m.render()) else {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "tcpstall watch: metrics unavailable\n",
                );
            };
            let mut response = Response::new(Full::new(Bytes::from(body)));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        "/healthz" if !readable => method_not_allowed(),
        "/healthz" if shared.heartbeat.alive() => text(StatusCode::OK, "ok\n"),
        "/healthz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "tcpstall watch: the event loop is not running\n",
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "tcpstall watch: metrics are at /metrics\n",
        ),
    }
}

/// Whether the request may read the metrics: always without users; with users, by its
/// credentials (a bcrypt on the blocking thread when they were not verified before).
async fn authorized(request: &Request<Incoming>, shared: &Arc<Shared>) -> bool {
    let Some(auth) = &shared.auth else {
        return true;
    };
    let header = request
        .headers()
        .get(AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    match auth.check(header) {
        Check::Allowed => true,
        Check::Denied => false,
        Check::Verify(pending) => {
            let shared = Arc::clone(shared);
            tokio::task::spawn_blocking(move || {
                shared
                    .auth
                    .as_ref()
                    .is_some_and(|auth| auth.verify(pending))
            })
            .await
            .unwrap_or(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::tests::stall;
    use crate::web_config::tests::{TestDir, write_certificates};
    use std::io::{Read, Write};
    use std::net::TcpStream as StdStream;
    use std::os::fd::AsRawFd;
    use std::path::Path;

    fn metrics() -> Arc<Mutex<Metrics>> {
        let metrics = Arc::new(Mutex::new(Metrics::new(10, 32768)));
        metrics.lock().unwrap().record(&stall("client", 40000, 41));
        metrics
    }

    /// Sends `request` and reads until the server closes: the whole response.
    fn exchange(stream: &mut impl ReadWrite, request: &[u8]) -> String {
        stream.write_all(request).unwrap();
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        String::from_utf8_lossy(&response).into_owned()
    }

    trait ReadWrite: Read + Write {}
    impl<T: Read + Write> ReadWrite for T {}

    fn plain(address: SocketAddr, request: &str) -> String {
        let mut stream = StdStream::connect(address).unwrap();
        exchange(&mut stream, request.as_bytes())
    }

    /// Waits (at most a minute, against a hang) until `done` holds.
    fn eventually(mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..600 {
            if done() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    #[test]
    fn paths_and_methods() {
        let exporter = Exporter::start(
            "127.0.0.1:0".parse().unwrap(),
            metrics(),
            WebConfig::default(),
        )
        .unwrap();
        let address = exporter.address;
        let ok = plain(address, "GET /metrics?x=1&y HTTP/1.0\r\n\r\n");
        assert!(
            ok.starts_with("HTTP/1.0 200 ") || ok.starts_with("HTTP/1.1 200 "),
            "{ok}"
        );
        assert!(ok.contains("text/plain; version=0.0.4"));
        assert!(ok.contains("tcpstall_stalls_total{comm=\"client\""));
        let head = plain(
            address,
            "HEAD /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        );
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        assert!(!head.contains("tcpstall_stalls_total"), "{head}");
        let post = plain(
            address,
            "POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        assert!(
            post.to_ascii_lowercase().contains("allow: get, head"),
            "{post}"
        );
        let missing = plain(address, "GET /metric HTTP/1.0\r\n\r\n");
        assert!(missing.contains(" 404 "), "{missing}");
        exporter.heartbeat();
        let health = plain(address, "GET /healthz HTTP/1.0\r\n\r\n");
        assert!(
            health.contains(" 200 ") && health.ends_with("\r\n\r\nok\n"),
            "{health}"
        );
        let garbage = plain(address, "\x16\x03\x01 not http\r\n\r\n");
        assert!(garbage.contains(" 400 "), "{garbage}");
        let errors = exporter.shared.errors.clone();
        assert!(eventually(|| errors.get(ScrapeError::BadRequest) == 1));
    }

    #[test]
    fn a_head_past_the_limit_is_answered_431() {
        let exporter = Exporter::start(
            "127.0.0.1:0".parse().unwrap(),
            metrics(),
            WebConfig::default(),
        )
        .unwrap();
        let mut stream = StdStream::connect(exporter.address).unwrap();
        let mut line = b"GET /".to_vec();
        line.resize(HEAD_LIMIT + 1, b'a');
        let response = exchange(&mut stream, &line);
        // The server may reset the connection over the rest of the line instead.
        assert!(
            response.is_empty() || response.starts_with("HTTP/1.1 431 "),
            "{response}"
        );
        let errors = exporter.shared.errors.clone();
        assert!(eventually(|| errors.get(ScrapeError::HeaderTooLarge) == 1));
        let ok = plain(exporter.address, "GET /metrics HTTP/1.0\r\n\r\n");
        assert!(ok.contains(" 200 "), "{ok}");
    }

    #[test]
    fn a_connection_past_the_cap_is_closed_at_once() {
        let exporter = Exporter::start(
            "127.0.0.1:0".parse().unwrap(),
            metrics(),
            WebConfig::default(),
        )
        .unwrap();
        let idle: Vec<StdStream> = (0..MAX_CONNECTIONS)
            .map(|_| StdStream::connect(exporter.address).unwrap())
            .collect();
        let refused = plain(exporter.address, "GET /metrics HTTP/1.0\r\n\r\n");
        assert_eq!(refused, "", "served past the cap");
        assert_eq!(
            exporter.shared.errors.get(ScrapeError::TooManyConnections),
            1
        );
        drop(idle);
        // The slots come back as the idle connections close.
        assert!(eventually(|| plain(
            exporter.address,
            "GET /metrics HTTP/1.0\r\n\r\n"
        )
        .contains(" 200 ")));
    }

    #[test]
    fn a_listener_that_cannot_accept_any_more_is_a_failure() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let same_socket = listener.try_clone().unwrap();
        let exporter = Exporter::serve(listener, metrics(), WebConfig::default()).unwrap();
        assert!(plain(exporter.address, "GET /metrics HTTP/1.0\r\n\r\n").contains(" 200 "));
        assert_eq!(exporter.failure(), None);
        // shutdown(2) on a listening socket stops it listening: accept(2) then fails
        // with EINVAL for good.
        // SAFETY: shutdown on a socket this test owns.
        assert_eq!(
            unsafe { libc::shutdown(same_socket.as_raw_fd(), libc::SHUT_RD) },
            0
        );
        let failure = exporter.wait_failure(Duration::from_secs(60));
        assert!(
            failure
                .as_deref()
                .is_some_and(|f| f.starts_with("accepting connections: ")),
            "{failure:?}"
        );
    }

    fn tls_client(dir: &Path, client_certificate: bool) -> Arc<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(dir.join("ca.pem")).unwrap())
            .unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
        Arc::new(if client_certificate {
            builder
                .with_client_auth_cert(
                    vec![CertificateDer::from_pem_file(dir.join("client.pem")).unwrap()],
                    PrivateKeyDer::from_pem_file(dir.join("client-key.pem")).unwrap(),
                )
                .unwrap()
        } else {
            builder.with_no_client_auth()
        })
    }

    fn https(address: SocketAddr, client: &Arc<rustls::ClientConfig>, request: &str) -> String {
        let connection =
            rustls::ClientConnection::new(Arc::clone(client), "127.0.0.1".try_into().unwrap())
                .unwrap();
        let mut stream = rustls::StreamOwned::new(connection, StdStream::connect(address).unwrap());
        exchange(&mut stream, request.as_bytes())
    }

    #[test]
    fn tls_with_basic_auth() {
        let dir = TestDir::new("endpoint-tls");
        write_certificates(&dir.0);
        let hash = bcrypt::hash("right", 4).unwrap();
        let config = crate::web_config::parse(
            &format!("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  prometheus: {hash}\n"),
            &dir.0,
        )
        .unwrap();
        let exporter = Exporter::start("127.0.0.1:0".parse().unwrap(), metrics(), config).unwrap();
        assert!(exporter.https);
        let client = tls_client(&dir.0, false);
        let request = |credentials: Option<&str>| {
            use base64::Engine as _;
            let authorization = credentials.map_or(String::new(), |c| {
                format!(
                    "Authorization: Basic {}\r\n",
                    base64::engine::general_purpose::STANDARD.encode(c)
                )
            });
            https(
                exporter.address,
                &client,
                &format!(
                    "GET /metrics HTTP/1.1\r\nHost: a\r\n{authorization}Connection: close\r\n\r\n"
                ),
            )
        };
        let none = request(None);
        assert!(none.starts_with("HTTP/1.1 401 "), "{none}");
        assert!(none.contains("Basic realm=\"tcpstall\""), "{none}");
        let wrong = request(Some("prometheus:wrong"));
        assert!(wrong.starts_with("HTTP/1.1 401 "), "{wrong}");
        let unknown = request(Some("nobody:right"));
        assert!(unknown.starts_with("HTTP/1.1 401 "), "{unknown}");
        for _ in 0..2 {
            let right = request(Some("prometheus:right"));
            assert!(right.starts_with("HTTP/1.1 200 "), "{right}");
            assert!(right.contains("tcpstall_stalls_total{comm=\"client\""));
        }
        let errors = exporter.shared.errors.clone();
        assert_eq!(errors.get(ScrapeError::Unauthorized), 3);
        // Plain HTTP to the TLS port is no handshake.
        let _ = plain(exporter.address, "GET /metrics HTTP/1.0\r\n\r\n");
        assert!(eventually(|| errors.get(ScrapeError::TlsHandshake) == 1));
    }

    #[test]
    fn tls_requiring_a_client_certificate() {
        let dir = TestDir::new("endpoint-mtls");
        write_certificates(&dir.0);
        let config = crate::web_config::parse(
            "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  client_ca_file: ca.pem\n  client_auth_type: RequireAndVerifyClientCert\n",
            &dir.0,
        )
        .unwrap();
        let exporter = Exporter::start("127.0.0.1:0".parse().unwrap(), metrics(), config).unwrap();
        let request = "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
        let with = https(exporter.address, &tls_client(&dir.0, true), request);
        assert!(with.starts_with("HTTP/1.1 200 "), "{with}");
        let without = https(exporter.address, &tls_client(&dir.0, false), request);
        assert_eq!(without, "");
        let errors = exporter.shared.errors.clone();
        assert!(eventually(|| errors.get(ScrapeError::TlsHandshake) == 1));
    }

    #[test]
    fn a_scraper_idle_between_requests_is_no_error_a_silent_peer_is() {
        let exporter = Exporter::start(
            "127.0.0.1:0".parse().unwrap(),
            metrics(),
            WebConfig::default(),
        )
        .unwrap();
        let mut silent = StdStream::connect(exporter.address).unwrap();
        // A keep-alive scrape, then nothing: closed after HEAD_TIMEOUT.
        let scraped = plain(exporter.address, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(scraped.starts_with("HTTP/1.1 200 "), "{scraped}");
        let mut nothing = Vec::new();
        let _ = silent.read_to_end(&mut nothing);
        assert!(nothing.is_empty());
        // One more exchange: the runtime's one thread has counted (or not) both closes
        // before it accepts this connection.
        assert!(plain(exporter.address, "GET /healthz HTTP/1.0\r\n\r\n").contains(" 200 "));
        assert_eq!(exporter.shared.errors.get(ScrapeError::Timeout), 1);
    }

    #[test]
    fn health_is_the_event_loop_running_lately() {
        let started = Instant::now();
        let heartbeat = Heartbeat {
            since: started,
            last_ms: AtomicU64::new(0),
        };
        assert!(heartbeat.alive(), "at start");
        // Started long ago and never beaten since.
        let Some(long_ago) = started.checked_sub(STALE_EVENT_LOOP * 2) else {
            return;
        };
        let stale = Heartbeat {
            since: long_ago,
            last_ms: AtomicU64::new(0),
        };
        assert!(!stale.alive());
        stale.beat();
        assert!(stale.alive());
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen_address("9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(
            parse_listen_address("0.0.0.0:9464").unwrap(),
            "0.0.0.0:9464".parse().unwrap()
        );
        assert!(parse_listen_address("nonsense").is_err());
    }
}
