//! `--web.config.file`: the endpoint's TLS and basic-auth settings, in the file format of
//! Prometheus's exporter-toolkit (its docs/web-configuration.md), so that a file written
//! for node_exporter, and the scrape_config that goes with it, serve here too.
//!
//! Paths in the file are relative to the file's directory. Every problem is an error
//! of one line: a field tcpstall does not offer is named rather than ignored.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::SupportedProtocolVersion;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use serde::Deserialize;

/// The endpoint's settings read from the file.
#[derive(Debug, Default)]
pub struct WebConfig {
    /// TLS, when the file names a certificate and its key.
    pub tls: Option<Arc<ServerConfig>>,
    /// Basic-auth users and their bcrypt hashes; empty: no authentication.
    pub users: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebConfigFile {
    tls_server_config: Option<TlsServerConfig>,
    http_server_config: Option<HttpServerConfig>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerConfig {
    cert_file: Option<String>,
    key_file: Option<String>,
    client_ca_file: Option<String>,
    client_auth_type: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    // exporter-toolkit's, not offered here: read so that the error names them.
    cert: Option<serde_norway::Value>,
    key: Option<serde_norway::Value>,
    client_ca: Option<serde_norway::Value>,
    cipher_suites: Option<serde_norway::Value>,
    curve_preferences: Option<serde_norway::Value>,
    prefer_server_cipher_suites: Option<serde_norway::Value>,
    client_allowed_sans: Option<serde_norway::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpServerConfig {
    /// HTTP/2 is not served (HTTP/1.1 only); `true` or `false` are both accepted, as
    /// Prometheus scrapes over HTTP/1.1 either way.
    #[allow(dead_code)]
    http2: Option<bool>,
    headers: Option<serde_norway::Value>,
}

/// The most any of the files is read: far more than a web config, a certificate chain
/// or a key takes, and a bound on a path that names something else (/dev/zero, say).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// A file's bytes, at most [`MAX_FILE_BYTES`] of them.
fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {} KiB", MAX_FILE_BYTES >> 10));
    }
    Ok(bytes)
}

/// Reads and checks the file: its certificate and key loaded, each hash parsed.
pub fn load(path: &Path) -> Result<WebConfig, String> {
    let text = read_bounded(path)
        .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "not UTF-8 text".into()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let directory = path.parent().unwrap_or(Path::new("."));
    parse(&text, directory).map_err(|e| format!("{}: {e}", path.display()))
}

/// The file's text, its relative paths taken from `directory`.
pub fn parse(text: &str, directory: &Path) -> Result<WebConfig, String> {
    // An empty file (or one of comments) is no settings, as for exporter-toolkit.
    let file: Option<WebConfigFile> =
        serde_norway::from_str(text).map_err(|e| one_line(&e.to_string()))?;
    let file = file.unwrap_or_default();
    if let Some(http) = &file.http_server_config
        && http.headers.is_some()
    {
        return Err("http_server_config.headers is not supported by tcpstall".into());
    }
    let users = file.basic_auth_users.unwrap_or_default();
    for (user, hash) in &users {
        // RFC 7617 2: the user-id cannot contain a colon.
        if user.is_empty() || user.contains(':') {
            return Err(format!(
                "basic_auth_users: {user:?} is not a user name (not empty, no colon)"
            ));
        }
        hash.parse::<bcrypt::HashParts>()
            .map_err(|e| format!("basic_auth_users: {user}: not a bcrypt hash ({e})"))?;
    }
    let tls = match file.tls_server_config {
        Some(tls) => server_config(&tls, directory)?,
        None => None,
    };
    Ok(WebConfig { tls, users })
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The TLS settings as rustls's, or `None` when the section names no certificate at all.
fn server_config(
    tls: &TlsServerConfig,
    directory: &Path,
) -> Result<Option<Arc<ServerConfig>>, String> {
    let unsupported = [
        ("cert", tls.cert.is_some()),
        ("key", tls.key.is_some()),
        ("client_ca", tls.client_ca.is_some()),
        ("cipher_suites", tls.cipher_suites.is_some()),
        ("curve_preferences", tls.curve_preferences.is_some()),
        (
            "prefer_server_cipher_suites",
            tls.prefer_server_cipher_suites.is_some(),
        ),
        ("client_allowed_sans", tls.client_allowed_sans.is_some()),
    ];
    if let Some((field, _)) = unsupported.iter().find(|(_, given)| *given) {
        return Err(format!(
            "tls_server_config.{field} is not supported by tcpstall (use cert_file, key_file, client_ca_file, client_auth_type, min_version, max_version)"
        ));
    }
    let (cert_file, key_file) = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => (directory.join(cert), directory.join(key)),
        (None, None)
            if tls.client_ca_file.is_none()
                && tls.client_auth_type.is_none()
                && tls.min_version.is_none()
                && tls.max_version.is_none() =>
        {
            return Ok(None);
        }
        (None, _) => return Err("tls_server_config: missing cert_file".into()),
        (_, None) => return Err("tls_server_config: missing key_file".into()),
    };
    let versions = protocol_versions(tls)?;
    let client_ca = tls.client_ca_file.as_ref().map(|f| directory.join(f));
    // Go's tls.ClientAuthType names, as exporter-toolkit reads them.
    let client_auth = tls.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let require_client_cert = match (client_auth, &client_ca) {
        ("NoClientCert", None) => None,
        ("NoClientCert", Some(_)) => {
            return Err("tls_server_config: client_ca_file is given but client_auth_type is NoClientCert (use VerifyClientCertIfGiven or RequireAndVerifyClientCert)".into());
        }
        ("VerifyClientCertIfGiven", Some(ca)) => Some((ca, false)),
        ("RequireAndVerifyClientCert", Some(ca)) => Some((ca, true)),
        ("VerifyClientCertIfGiven" | "RequireAndVerifyClientCert", None) => {
            return Err(format!(
                "tls_server_config: client_auth_type {client_auth} needs client_ca_file"
            ));
        }
        ("RequestClientCert" | "RequireAnyClientCert", _) => {
            return Err(format!(
                "tls_server_config: client_auth_type {client_auth} (a client certificate not verified) is not supported by tcpstall: use VerifyClientCertIfGiven or RequireAndVerifyClientCert"
            ));
        }
        (other, _) => {
            return Err(format!(
                "tls_server_config: unknown client_auth_type {other:?} (NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert)"
            ));
        }
    };
    let certificates = certificates_of(&cert_file, "cert_file")?;
    let key = read_bounded(&key_file)
        .and_then(|pem| PrivateKeyDer::from_pem_slice(&pem).map_err(|e| pem_error(&e)))
        .map_err(|e| format!("key_file {}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let builder = match require_client_cert {
        None => builder.with_no_client_auth(),
        Some((ca_file, required)) => {
            let mut roots = RootCertStore::empty();
            for certificate in certificates_of(ca_file, "client_ca_file")? {
                roots
                    .add(certificate)
                    .map_err(|e| format!("client_ca_file {}: {e}", ca_file.display()))?;
            }
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            if !required {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|e| format!("client_ca_file {}: {e}", ca_file.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certificates, key).map_err(|e| {
        format!(
            "cert_file {} with key_file {}: {e}",
            cert_file.display(),
            key_file.display()
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}

/// Every certificate of a PEM file; none is an error.
fn certificates_of(path: &Path, field: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = read_bounded(path)
        .and_then(|pem| {
            CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| pem_error(&e))
        })
        .map_err(|e| format!("{field} {}: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!(
            "{field} {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certificates)
}

fn pem_error(error: &rustls::pki_types::pem::Error) -> String {
    match error {
        rustls::pki_types::pem::Error::Io(e) => e.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of that kind in it".into(),
        other => format!("{other:?}"),
    }
}

/// TLS 1.2 up to 1.3 unless min_version or max_version say otherwise (exporter-toolkit's
/// default minimum is TLS12 too); rustls offers nothing older.
fn protocol_versions(
    tls: &TlsServerConfig,
) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let rank = |field: &str, text: &Option<String>, default: u8| match text.as_deref() {
        None => Ok(default),
        Some("TLS12") => Ok(2),
        Some("TLS13") => Ok(3),
        Some("TLS10" | "TLS11") => Err(format!(
            "tls_server_config.{field}: TLS 1.0 and 1.1 are not offered (TLS12 or TLS13)"
        )),
        Some(other) => Err(format!(
            "tls_server_config.{field}: unknown version {other:?} (TLS12 or TLS13)"
        )),
    };
    let min = rank("min_version", &tls.min_version, 2)?;
    let max = rank("max_version", &tls.max_version, 3)?;
    if min > max {
        return Err("tls_server_config: min_version is above max_version".into());
    }
    Ok([(2, &rustls::version::TLS12), (3, &rustls::version::TLS13)]
        .into_iter()
        .filter(|(rank, _)| (min..=max).contains(rank))
        .map(|(_, version)| version)
        .collect())
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A directory of its own under the system's temporary one, removed on drop.
    pub struct TestDir(pub PathBuf);

    impl TestDir {
        pub fn new(name: &str) -> TestDir {
            let path = std::env::temp_dir()
                .join(format!("tcpstall-web-config-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).expect("create a test directory");
            TestDir(path)
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Writes a throwaway CA (ca.pem), a server certificate for 127.0.0.1 and
    /// localhost signed by it (cert.pem, key.pem), a client certificate signed by it
    /// (client.pem, client-key.pem) and a second self-signed pair (other.pem,
    /// other-key.pem) into `dir`.
    pub fn write_certificates(dir: &Path) {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "tcpstall test CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
        write("ca.pem", ca.pem());
        for (cert, key, names) in [
            (
                "cert.pem",
                "key.pem",
                vec!["127.0.0.1".to_string(), "localhost".into()],
            ),
            ("client.pem", "client-key.pem", vec!["client".to_string()]),
        ] {
            let key_pair = KeyPair::generate().unwrap();
            let certificate = CertificateParams::new(names)
                .unwrap()
                .signed_by(&key_pair, &ca)
                .unwrap();
            write(cert, certificate.pem());
            write(key, key_pair.serialize_pem());
        }
        let other_key = KeyPair::generate().unwrap();
        let other = CertificateParams::new(vec!["other".to_string()])
            .unwrap()
            .self_signed(&other_key)
            .unwrap();
        write("other.pem", other.pem());
        write("other-key.pem", other_key.serialize_pem());
    }

    #[test]
    fn a_good_file_with_relative_paths() {
        let dir = TestDir::new("good");
        write_certificates(&dir.0);
        let hash = bcrypt::hash("secret", 4).unwrap();
        let file = dir.0.join("web.yml");
        std::fs::write(
            &file,
            format!(
                "# as for node_exporter\ntls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  client_ca_file: ca.pem\n  client_auth_type: VerifyClientCertIfGiven\n  min_version: TLS12\nhttp_server_config:\n  http2: false\nbasic_auth_users:\n  prometheus: '{hash}'\n"
            ),
        )
        .unwrap();
        let config = load(&file).unwrap();
        assert!(config.tls.is_some());
        assert_eq!(config.users.get("prometheus"), Some(&hash));
        // Basic auth alone, and an empty file.
        let config = parse(&format!("basic_auth_users:\n  a: {hash}\n"), &dir.0).unwrap();
        assert!(config.tls.is_none());
        assert_eq!(config.users.len(), 1);
        let config = parse("# nothing yet\n", &dir.0).unwrap();
        assert!(config.tls.is_none() && config.users.is_empty());
        let config = parse("tls_server_config:\n", &dir.0).unwrap();
        assert!(config.tls.is_none());
    }

    #[test]
    fn every_malformed_file_is_one_line_naming_its_fault() {
        let dir = TestDir::new("malformed");
        write_certificates(&dir.0);
        std::fs::write(dir.0.join("not-pem.pem"), "hello\n").unwrap();
        let hash = bcrypt::hash("secret", 4).unwrap();
        let tls = |rest: &str| {
            format!("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n{rest}")
        };
        let cases = [
            ("tls_server_config: [\n".to_string(), "line"),
            (
                "basic_auth_user:\n  a: b\n".into(),
                "unknown field `basic_auth_user`",
            ),
            (tls("  cert_fil: x\n"), "unknown field `cert_fil`"),
            (
                "tls_server_config:\n  cert_file: cert.pem\n".into(),
                "missing key_file",
            ),
            (
                "tls_server_config:\n  key_file: key.pem\n".into(),
                "missing cert_file",
            ),
            (
                "tls_server_config:\n  client_ca_file: ca.pem\n".into(),
                "missing cert_file",
            ),
            (
                "tls_server_config:\n  cert_file: absent.pem\n  key_file: key.pem\n".into(),
                "absent.pem",
            ),
            (
                "tls_server_config:\n  cert_file: not-pem.pem\n  key_file: key.pem\n".into(),
                "no PEM certificate",
            ),
            (
                "tls_server_config:\n  cert_file: cert.pem\n  key_file: not-pem.pem\n".into(),
                "key_file",
            ),
            (
                "tls_server_config:\n  cert_file: cert.pem\n  key_file: other-key.pem\n".into(),
                "with key_file",
            ),
            (
                tls("  client_ca_file: ca.pem\n"),
                "client_auth_type is NoClientCert",
            ),
            (
                tls("  client_auth_type: RequireAndVerifyClientCert\n"),
                "needs client_ca_file",
            ),
            (
                tls("  client_auth_type: RequireAnyClientCert\n"),
                "not supported",
            ),
            (
                tls("  client_ca_file: ca.pem\n  client_auth_type: Sometimes\n"),
                "unknown client_auth_type",
            ),
            (
                tls(
                    "  client_ca_file: not-pem.pem\n  client_auth_type: RequireAndVerifyClientCert\n",
                ),
                "client_ca_file",
            ),
            (tls("  min_version: TLS10\n"), "not offered"),
            (tls("  max_version: SSL3\n"), "unknown version"),
            (
                tls("  min_version: TLS13\n  max_version: TLS12\n"),
                "above max_version",
            ),
            (
                tls("  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"),
                "cipher_suites is not supported",
            ),
            (
                "http_server_config:\n  headers:\n    X-A: b\n".into(),
                "headers is not supported",
            ),
            (
                "basic_auth_users:\n  prometheus: plain-text\n".into(),
                "not a bcrypt hash",
            ),
            (
                format!("basic_auth_users:\n  'a:b': '{hash}'\n"),
                "not a user name",
            ),
        ];
        for (text, expected) in cases {
            let error = match parse(&text, &dir.0) {
                Ok(_) => panic!("accepted:\n{text}"),
                Err(e) => e,
            };
            assert!(error.contains(expected), "{error:?} for:\n{text}");
            assert!(!error.contains('\n'), "{error:?}");
        }
        let missing = load(&dir.0.join("absent.yml")).unwrap_err();
        assert!(missing.contains("absent.yml"), "{missing}");
        let endless = load(Path::new("/dev/zero")).unwrap_err();
        assert!(endless.contains("larger than 1024 KiB"), "{endless}");
        let endless_key = parse(
            "tls_server_config:\n  cert_file: cert.pem\n  key_file: /dev/zero\n",
            &dir.0,
        )
        .unwrap_err();
        assert!(endless_key.contains("larger than"), "{endless_key}");
    }
}
