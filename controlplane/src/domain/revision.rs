//! The revision aggregate: one immutable model build of a deployment, registered
//! only once its artifact has been read and its sha256 matches.
//!
//! Registration is the single gate between "a URI someone typed" and "a
//! revision traffic may be sent to": serving and rollouts accept only verified
//! revisions. The artifact check itself is I/O, so the service layer performs
//! it and passes the outcome in as an [`ArtifactCheck`].

use stoker_schemas::events::{RevisionEvent, RevisionRegistered};
use stoker_schemas::ids::{DeploymentId, RevisionId};

use super::{Aggregate, DomainError, Meta};

/// What the service layer found at `model_uri` before registering.
#[derive(Clone, Debug, PartialEq)]
pub enum ArtifactCheck {
    /// The artifact was read completely; this is its sha256 (hex).
    Verified { sha256: String },
    /// Nothing is at the URI. Permanent: retrying the same registration cannot
    /// help; register again with a URI that exists.
    Absent,
    /// Something is there but could not be read (permissions, I/O, storage down).
    Unreadable(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum RevisionCommand {
    Register {
        deployment_id: DeploymentId,
        revision_id: RevisionId,
        model_uri: String,
        model_sha256: String,
        tokenizer_hash: String,
        chat_template_hash: String,
        chat_template_origin: Option<String>,
        precision: String,
        runtime_version: String,
        artifact: ArtifactCheck,
        /// The deployment exists and is not retired (looked up by the caller).
        deployment_exists: bool,
    },
}

/// A registered revision's identity, as recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct RegisteredRevision {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub model_uri: String,
    /// Lowercase hex.
    pub model_sha256: String,
    pub tokenizer_hash: String,
    pub chat_template_hash: String,
    /// Where the template came from (the model file, `--chat-template FILE`).
    pub chat_template_origin: Option<String>,
    pub precision: String,
    pub runtime_version: String,
}

/// The state of one revision stream; `Default` is a revision not registered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Revision {
    registered: Option<RegisteredRevision>,
}

impl Revision {
    /// The registration, once the artifact has been verified.
    pub fn registered(&self) -> Option<&RegisteredRevision> {
        self.registered.as_ref()
    }

    /// Whether traffic may be sent to this revision.
    pub fn is_verified(&self) -> bool {
        self.registered.is_some()
    }
}

impl Aggregate for Revision {
    type Command = RevisionCommand;
    type Event = RevisionEvent;

    fn handle(
        &self,
        cmd: RevisionCommand,
        _meta: &Meta,
    ) -> Result<Vec<RevisionEvent>, DomainError> {
        let RevisionCommand::Register {
            deployment_id: deployment,
            revision_id: revision,
            model_uri,
            model_sha256,
            tokenizer_hash,
            chat_template_hash,
            chat_template_origin,
            precision,
            runtime_version,
            artifact,
            deployment_exists,
        } = cmd;
        if self.registered.is_some() {
            return Err(DomainError::AlreadyExists {
                kind: "revision",
                id: revision.into_string(),
            });
        }
        if !deployment_exists {
            return Err(DomainError::NotFound {
                kind: "deployment",
                id: deployment.into_string(),
            });
        }
        let actual = match artifact {
            ArtifactCheck::Verified { sha256 } => sha256,
            ArtifactCheck::Absent => {
                return Err(DomainError::RevisionAbsent {
                    deployment_id: deployment,
                    revision_id: revision,
                    model_uri,
                });
            }
            ArtifactCheck::Unreadable(detail) => {
                return Err(DomainError::ArtifactUnreadable {
                    revision_id: revision,
                    model_uri,
                    detail,
                });
            }
        };
        if !actual.eq_ignore_ascii_case(&model_sha256) {
            return Err(DomainError::HashMismatch {
                revision_id: revision,
                expected: model_sha256,
                actual,
            });
        }
        Ok(vec![
            RevisionRegistered {
                deployment_id: deployment,
                revision_id: revision,
                model_uri,
                model_sha256: model_sha256.to_ascii_lowercase(),
                tokenizer_hash,
                chat_template_hash,
                chat_template_origin,
                precision,
                runtime_version,
            }
            .into(),
        ])
    }

    fn apply(&mut self, ev: &RevisionEvent) {
        let RevisionEvent::RevisionRegistered(e) = ev;
        self.registered = Some(RegisteredRevision {
            deployment_id: e.deployment_id.clone(),
            revision_id: e.revision_id.clone(),
            model_uri: e.model_uri.clone(),
            model_sha256: e.model_sha256.clone(),
            tokenizer_hash: e.tokenizer_hash.clone(),
            chat_template_hash: e.chat_template_hash.clone(),
            chat_template_origin: e.chat_template_origin.clone(),
            precision: e.precision.clone(),
            runtime_version: e.runtime_version.clone(),
        });
    }
}
