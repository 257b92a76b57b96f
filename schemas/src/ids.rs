//! Identifiers as newtypes: deployment, revision, rollout, executor, batch,
//! file, request, tenant and API key ids.
//!
//! An id is validated once, when it is parsed: at the HTTP edge (path and body
//! parameters), from the process's own config, and when an event or row is
//! read back from the store. The control plane's service methods take these
//! types, so a malformed id cannot reach a command. Past that point a
//! `DeploymentId` is known to be a valid deployment id, so no code checks a
//! `String` later and no code can forget to.
//!
//! The transport's messages (`crate::transport`) carry these types too, so
//! a job, reply or capacity report with a malformed id does not decode (it
//! is dropped as any undecodable message is). Each type's rule lives in its
//! constructor ([`FromStr`], [`TryFrom<String>`]) and fails with an
//! [`IdError`] naming the kind of id and the reason.
//!
//! On the wire nothing changes: every id serializes as a plain JSON string
//! (serde `try_from`/`into` `String`), and its JSON Schema and OpenAPI schema
//! are those of `String`, so the checked-in schemas stay as they are. A
//! malformed id fails deserialization with the `IdError` message.
//!
//! The rules:
//!
//! - deployment, revision and rollout ids become part of stream ids
//!   (`{deployment}/{revision}/{workload}`): 1 to 64 characters of
//!   `[A-Za-z0-9._-]`, so they can neither contain the separator nor need
//!   escaping in URLs;
//! - executor ids (default `{role}-{hostname}-{pid}`): 1 to 128 characters of
//!   `[A-Za-z0-9._-]`;
//! - batch ids: `batch_` then `[A-Za-z0-9._-]`, at most 64 characters in all;
//! - file ids: `file-` then `[A-Za-z0-9._-]`, at most 128 characters in all
//!   (a batch's output file is `file-{batch id without batch_}-output`);
//! - request ids: 1 to 128 characters of `[A-Za-z0-9._-]`;
//! - tenant ids: 1 to 64 characters of `[A-Za-z0-9._-]`;
//! - API key ids: `k` then `[A-Za-z0-9._-]`, at most 64 characters.
//!
//! Batch, file and request ids minted here (uuid v4) cannot fail.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

/// Why a string is not a valid id of some kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdReason {
    Empty,
    /// `len` characters, more than `max`.
    TooLong {
        len: usize,
        max: usize,
    },
    /// A character outside `[A-Za-z0-9._-]`.
    Char(char),
    /// The id does not start with the kind's prefix.
    Prefix(&'static str),
}

impl fmt::Display for IdReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdReason::Empty => f.write_str("it is empty"),
            IdReason::TooLong { len, max } => {
                write!(f, "it has {len} characters; at most {max} are allowed")
            }
            IdReason::Char(c) => write!(
                f,
                "{c:?} is not allowed; use letters, digits, '.', '_' and '-'"
            ),
            IdReason::Prefix(p) => write!(f, "it must start with {p:?}"),
        }
    }
}

/// A string refused as an id: which kind of id, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdError {
    /// `deployment`, `revision`, `rollout`, `executor`, `batch`, `file` or `request`.
    pub kind: &'static str,
    pub reason: IdReason,
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} id: {}", self.kind, self.reason)
    }
}

impl std::error::Error for IdError {}

/// The shared rule: non-empty, at most `max` characters, `prefix` first, then
/// only `[A-Za-z0-9._-]`. Checked in that order.
fn check(kind: &'static str, s: &str, max: usize, prefix: &'static str) -> Result<(), IdError> {
    let err = |reason| Err(IdError { kind, reason });
    if s.is_empty() {
        return err(IdReason::Empty);
    }
    let len = s.chars().count();
    if len > max {
        return err(IdReason::TooLong { len, max });
    }
    let Some(rest) = s.strip_prefix(prefix) else {
        return err(IdReason::Prefix(prefix));
    };
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return err(IdReason::Char(c));
    }
    if rest.is_empty() {
        return err(IdReason::Empty);
    }
    Ok(())
}

macro_rules! id_type {
    (
        $(#[$doc:meta])*
        $name:ident, kind = $kind:literal, max = $max:literal, prefix = $prefix:literal
    ) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// The kind named in errors.
            pub const KIND: &'static str = $kind;
            /// The most characters an id of this kind may have.
            pub const MAX_LEN: usize = $max;
            /// What every id of this kind starts with (may be empty).
            pub const PREFIX: &'static str = $prefix;

            /// Parses `s`, checking this kind's rule.
            pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                check($kind, &s, $max, $prefix)?;
                Ok(Self(s))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;

            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;

            fn try_from(s: String) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;

            fn try_from(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        /// The schema of a plain string: the checked-in JSON Schemas predate the type.
        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                <String as schemars::JsonSchema>::inline_schema()
            }

            fn schema_name() -> Cow<'static, str> {
                <String as schemars::JsonSchema>::schema_name()
            }

            fn schema_id() -> Cow<'static, str> {
                <String as schemars::JsonSchema>::schema_id()
            }

            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                <String as schemars::JsonSchema>::json_schema(generator)
            }
        }

        /// The schema of a plain string, as in the checked-in `openapi.json`.
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                <String as utoipa::PartialSchema>::schema()
            }
        }

        impl utoipa::ToSchema for $name {
            fn name() -> Cow<'static, str> {
                <String as utoipa::ToSchema>::name()
            }
        }
    };
}

id_type! {
    /// A deployment's id: 1 to 64 characters of `[A-Za-z0-9._-]`.
    DeploymentId, kind = "deployment", max = 64, prefix = ""
}

id_type! {
    /// A revision's id within its deployment: 1 to 64 characters of
    /// `[A-Za-z0-9._-]` (by default the first 12 hex digits of the artifact's
    /// sha256).
    RevisionId, kind = "revision", max = 64, prefix = ""
}

id_type! {
    /// A rollout's id within its deployment: 1 to 64 characters of `[A-Za-z0-9._-]`.
    RolloutId, kind = "rollout", max = 64, prefix = ""
}

id_type! {
    /// An executor process's id: 1 to 128 characters of `[A-Za-z0-9._-]`.
    ExecutorId, kind = "executor", max = 128, prefix = ""
}

id_type! {
    /// A batch's id: `batch_` then `[A-Za-z0-9._-]`, at most 64 characters.
    BatchId, kind = "batch", max = 64, prefix = "batch_"
}

id_type! {
    /// A stored file's id: `file-` then `[A-Za-z0-9._-]`, at most 128 characters.
    FileId, kind = "file", max = 128, prefix = "file-"
}

id_type! {
    /// A tenant's id: 1 to 64 characters of `[A-Za-z0-9._-]` (it names the
    /// tenant's event stream and appears in URLs).
    TenantId, kind = "tenant", max = 64, prefix = ""
}

id_type! {
    /// An API key's id: `k` then `[A-Za-z0-9._-]`, at most 64 characters
    /// (minted as `k` and 16 hex digits). It is the public part of the key
    /// `stk_{key id}_{secret}`: what the audit trail and `/admin/v1/keys` show.
    KeyId, kind = "key", max = 64, prefix = "k"
}

id_type! {
    /// A request's id (the `x-request-id` header; `batch_req_…` for batch
    /// rows): 1 to 128 characters of `[A-Za-z0-9._-]`.
    RequestId, kind = "request", max = 128, prefix = ""
}

fn uuid_hex() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl BatchId {
    /// A fresh `batch_{32 hex digits}`.
    pub fn generate() -> Self {
        Self(format!("batch_{}", uuid_hex()))
    }

    /// The id without `batch_`.
    pub fn stem(&self) -> &str {
        &self.0[Self::PREFIX.len()..]
    }
}

impl FileId {
    /// A fresh `file-{32 hex digits}`, for an upload.
    pub fn generate() -> Self {
        Self(format!("file-{}", uuid_hex()))
    }

    /// `file-{stem}-output`: the output file of `batch`. At most 5 + 58 + 7
    /// characters, within the limit.
    pub fn batch_output(batch: &BatchId) -> Self {
        Self(format!("file-{}-output", batch.stem()))
    }

    /// `file-{stem}-errors`: the error file of `batch`.
    pub fn batch_errors(batch: &BatchId) -> Self {
        Self(format!("file-{}-errors", batch.stem()))
    }
}

impl RolloutId {
    /// A fresh `ro_{16 hex digits}`, for a rollout being started.
    pub fn generate() -> Self {
        Self(format!("ro_{}", &uuid_hex()[..16]))
    }
}

impl RequestId {
    /// A fresh 32-hex-digit id, as the edge gives every request.
    pub fn generate() -> Self {
        Self(uuid_hex())
    }

    /// A fresh `batch_req_{32 hex digits}`, for a line of a batch's output.
    pub fn generate_batch_row() -> Self {
        Self(format!("batch_req_{}", uuid_hex()))
    }
}

impl KeyId {
    /// A fresh `k{16 hex digits}`, for a key being issued.
    pub fn generate() -> Self {
        Self(format!("k{}", &uuid_hex()[..16]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason<T: FromStr<Err = IdError>>(s: &str) -> IdReason {
        match s.parse::<T>() {
            Ok(_) => panic!("{s:?} was accepted"),
            Err(e) => e.reason,
        }
    }

    /// The hostile inputs every kind refuses, each with its first bad character.
    const HOSTILE: [(&str, char); 7] = [
        ("a/b", '/'),
        ("../etc", '/'),
        ("a\nb", '\n'),
        ("a\u{0}b", '\u{0}'),
        ("a b", ' '),
        // Cyrillic `а` (U+0430) looks like Latin `a`.
        ("\u{430}dmin", '\u{430}'),
        ("a%2Fb", '%'),
    ];

    /// Valid, empty, oversized and hostile inputs for an unprefixed kind.
    fn plain<T: FromStr<Err = IdError> + fmt::Display + fmt::Debug>(max: usize, kind: &str) {
        for ok in ["a", "chat", "rev-1.2_x", "ABC123", &"x".repeat(max)] {
            let id: T = ok.parse().unwrap();
            assert_eq!(id.to_string(), ok);
        }
        assert_eq!(reason::<T>(""), IdReason::Empty);
        assert_eq!(
            reason::<T>(&"x".repeat(max + 1)),
            IdReason::TooLong { len: max + 1, max }
        );
        for (s, c) in HOSTILE {
            assert_eq!(reason::<T>(s), IdReason::Char(c), "{s:?}");
        }
        // `.` is allowed, but not `/`: `..` alone cannot traverse.
        assert_eq!(reason::<T>("../x"), IdReason::Char('/'));
        let e = "a/b".parse::<T>().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("invalid {kind} id: '/' is not allowed; use letters, digits, '.', '_' and '-'")
        );
    }

    #[test]
    fn deployment_ids() {
        plain::<DeploymentId>(64, "deployment");
    }

    #[test]
    fn revision_ids() {
        plain::<RevisionId>(64, "revision");
        // The default revision id: 12 hex digits of the sha256.
        assert!("0123456789ab".parse::<RevisionId>().is_ok());
    }

    #[test]
    fn rollout_ids() {
        plain::<RolloutId>(64, "rollout");
    }

    #[test]
    fn executor_ids() {
        plain::<ExecutorId>(128, "executor");
        assert!("executor-host.example-1234".parse::<ExecutorId>().is_ok());
    }

    #[test]
    fn request_ids() {
        plain::<RequestId>(128, "request");
        assert!(RequestId::generate().as_str().len() == 32);
        let row = RequestId::generate_batch_row();
        assert!(row.starts_with("batch_req_"));
        assert_eq!(row.as_str().parse::<RequestId>().unwrap(), row);
    }

    #[test]
    fn batch_ids() {
        let id: BatchId = "batch_1".parse().unwrap();
        assert_eq!(id.stem(), "1");
        assert_eq!(reason::<BatchId>(""), IdReason::Empty);
        assert_eq!(reason::<BatchId>("batch_"), IdReason::Empty);
        assert_eq!(reason::<BatchId>("b1"), IdReason::Prefix("batch_"));
        assert_eq!(reason::<BatchId>("file-1"), IdReason::Prefix("batch_"));
        let long = format!("batch_{}", "x".repeat(59));
        assert_eq!(
            reason::<BatchId>(&long),
            IdReason::TooLong { len: 65, max: 64 }
        );
        assert!(
            format!("batch_{}", "x".repeat(58))
                .parse::<BatchId>()
                .is_ok()
        );
        for (s, c) in HOSTILE {
            assert_eq!(reason::<BatchId>(&format!("batch_{s}")), IdReason::Char(c));
        }
        assert_eq!(reason::<BatchId>("batch_../x"), IdReason::Char('/'));
        let g = BatchId::generate();
        assert_eq!(g.as_str().parse::<BatchId>().unwrap(), g);
        assert_eq!(g.as_str().len(), 38);
    }

    #[test]
    fn file_ids() {
        assert!("file-abc".parse::<FileId>().is_ok());
        assert_eq!(reason::<FileId>(""), IdReason::Empty);
        assert_eq!(reason::<FileId>("file-"), IdReason::Empty);
        assert_eq!(reason::<FileId>("batch_1"), IdReason::Prefix("file-"));
        assert_eq!(reason::<FileId>("file_1"), IdReason::Prefix("file-"));
        let long = format!("file-{}", "x".repeat(124));
        assert_eq!(
            reason::<FileId>(&long),
            IdReason::TooLong { len: 129, max: 128 }
        );
        for (s, c) in HOSTILE {
            assert_eq!(reason::<FileId>(&format!("file-{s}")), IdReason::Char(c));
        }
        let g = FileId::generate();
        assert_eq!(g.as_str().parse::<FileId>().unwrap(), g);
        // Output and error files of the longest batch id are valid file ids.
        let b: BatchId = format!("batch_{}", "x".repeat(58)).parse().unwrap();
        for f in [FileId::batch_output(&b), FileId::batch_errors(&b)] {
            assert_eq!(f.as_str().parse::<FileId>().unwrap(), f);
        }
        let b: BatchId = "batch_7".parse().unwrap();
        assert_eq!(FileId::batch_output(&b), "file-7-output");
        assert_eq!(FileId::batch_errors(&b), "file-7-errors");
    }

    #[test]
    fn serde_is_a_plain_string() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct S {
            d: DeploymentId,
            b: Option<BatchId>,
            f: FileId,
        }
        let s = S {
            d: "chat".parse().unwrap(),
            b: Some("batch_1".parse().unwrap()),
            f: "file-2".parse().unwrap(),
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"{"d":"chat","b":"batch_1","f":"file-2"}"#);
        assert_eq!(serde_json::from_str::<S>(&json).unwrap(), s);

        let bad = serde_json::from_str::<S>(r#"{"d":"a/b","b":null,"f":"file-2"}"#).unwrap_err();
        assert!(
            bad.to_string().starts_with(
                "invalid deployment id: '/' is not allowed; use letters, digits, '.', '_' and '-'"
            ),
            "{bad}"
        );
        let bad = serde_json::from_str::<S>(r#"{"d":"x","b":"b1","f":"file-2"}"#).unwrap_err();
        assert!(
            bad.to_string()
                .starts_with("invalid batch id: it must start with \"batch_\""),
            "{bad}"
        );
        let bad = serde_json::from_str::<S>(r#"{"d":"","b":null,"f":"file-2"}"#).unwrap_err();
        assert!(
            bad.to_string()
                .starts_with("invalid deployment id: it is empty"),
            "{bad}"
        );
    }

    #[test]
    fn schemas_are_those_of_string() {
        use utoipa::PartialSchema;
        let mut g = schemars::SchemaGenerator::default();
        assert_eq!(
            g.subschema_for::<Option<FileId>>(),
            g.subschema_for::<Option<String>>()
        );
        assert_eq!(g.subschema_for::<RequestId>(), g.subschema_for::<String>());
        assert_eq!(
            serde_json::to_value(FileId::schema()).unwrap(),
            serde_json::to_value(String::schema()).unwrap()
        );
    }
}
