//! Request-level errors and their mapping to gRPC status codes, in one exhaustive match.
//! A tool that ran and failed is never here: that is a `CallResult`.

use tonic::{Code, Status};

use crate::front::admission::Refusal;

impl From<crate::front::entry::Turned> for RequestError {
    fn from(turned: crate::front::entry::Turned) -> Self {
        use crate::front::entry::Turned;
        match turned {
            Turned::ShuttingDown => RequestError::ShuttingDown,
            Turned::Overloaded(refusal) => RequestError::Overloaded(refusal),
            Turned::Decoded(full) => RequestError::Decoded(full),
        }
    }
}

impl From<crate::front::auth::Denied> for RequestError {
    fn from(denied: crate::front::auth::Denied) -> Self {
        use crate::front::auth::Denied;
        match denied {
            Denied::Unauthenticated(text) => RequestError::Unauthenticated(text),
            Denied::PermissionDenied(text) => RequestError::PermissionDenied(text),
        }
    }
}

/// Why a request could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request is malformed; the text says which field and why.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    SessionId(#[from] toolgate_core::session::InvalidSessionId),
    /// A value of the request cannot be JSON, or nests too deep.
    #[error(transparent)]
    Unrepresentable(#[from] toolgate_proto::protojson::Unrepresentable),
    /// The request's bindings name tools that are not registered, or malformed inputs.
    #[error(transparent)]
    Bindings(#[from] toolgate_core::dispatch::BindingProblems),
    /// A `RegisterRemote` definition that cannot be used.
    #[error("definition: {0}")]
    Definition(#[from] toolgate_remotes::SpecError),
    /// A registration the policy does not allow.
    #[error(transparent)]
    Refused(#[from] toolgate_remotes::RegistrationRefusal),
    #[error("the batch has {count} calls; the limit is {limit}")]
    TooManyCalls { count: usize, limit: u32 },
    /// A known option this server does not implement yet.
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Overloaded(Refusal),
    #[error("the server is shutting down")]
    ShuttingDown,
    /// Even with every result emptied, the reply is over `limits.max_reply_bytes`.
    #[error(
        "the reply would be {bytes} bytes even with every result emptied, over limits.max_reply_bytes ({limit}); send fewer calls per batch or raise the limit"
    )]
    ReplyTooLarge { bytes: usize, limit: usize },
    /// The client stopped reading its `DispatchBatch` stream, so the batch was cancelled.
    #[error(
        "the batch was cancelled: its stream went unread for {} (server.stall_timeout)",
        toolgate_core::duration::readable(*.0)
    )]
    Stalled(std::time::Duration),
    /// The connection's (or the server's) request bytes not yet decoded are at their bound.
    #[error("{}", request_backlog_text(.0))]
    RequestBacklog(crate::front::budget::Full),
    /// A request's message stayed incomplete for `server.stall_timeout`.
    #[error(
        "the request stopped arriving mid-message for {} (server.stall_timeout)",
        toolgate_core::duration::readable(*.0)
    )]
    RequestStalled(std::time::Duration),
    /// A reply's client took none of it for `server.stall_timeout`: it was dropped.
    #[error(
        "the reply went unread for {} (server.stall_timeout) and was dropped",
        toolgate_core::duration::readable(*.0)
    )]
    ReplyStalled(std::time::Duration),
    /// The connection's (or the server's) reply bytes not yet read are at their bound.
    #[error("{}", reply_backlog_text(.0))]
    ReplyBacklog(crate::front::budget::Full),
    #[error("no live session '{0}'")]
    UnknownSession(String),
    /// The shared session store cannot be reached; the cause is logged, not sent.
    #[error(
        "the session store is down: a named session's state cannot be read or written, so nothing ran; retry later, or send the batch without a session id"
    )]
    SessionStore(#[source] toolgate_core::session::StoreError),
    #[error("{0}")]
    PermissionDenied(String),
    /// No acceptable credentials (the text says what was wrong, never the credential).
    #[error("{0}")]
    Unauthenticated(String),
    #[error(transparent)]
    Remote(#[from] toolgate_remotes::RemoteError),
    #[error(transparent)]
    Approval(#[from] toolgate_core::approvals::ResolveError),
    /// What the request holds once decoded would pass a bound (`decoded.rs`).
    #[error(transparent)]
    Decoded(crate::front::decoded::DecodedFull),
    #[error(transparent)]
    TooManyWatches(#[from] toolgate_core::approvals::WatchesFull),
    /// The client stopped reading its `WatchApprovals` stream, so the watch was ended.
    #[error(
        "the watch was ended: its stream went unread for {} (server.stall_timeout); watch again (the pending approvals come first)",
        toolgate_core::duration::readable(*.0)
    )]
    WatchStalled(std::time::Duration),
}

impl From<RequestError> for Status {
    fn from(error: RequestError) -> Self {
        let code = match &error {
            RequestError::Invalid(_)
            | RequestError::SessionId(_)
            | RequestError::Unrepresentable(_)
            | RequestError::Bindings(_)
            | RequestError::Definition(_)
            | RequestError::TooManyCalls { .. }
            | RequestError::Unsupported(_) => Code::InvalidArgument,
            RequestError::Overloaded(_)
            | RequestError::Decoded(_)
            | RequestError::ReplyTooLarge { .. }
            | RequestError::RequestBacklog(_)
            | RequestError::ReplyBacklog(_)
            | RequestError::TooManyWatches(_) => Code::ResourceExhausted,
            RequestError::ShuttingDown | RequestError::SessionStore(_) => Code::Unavailable,
            RequestError::Stalled(_)
            | RequestError::WatchStalled(_)
            | RequestError::RequestStalled(_)
            | RequestError::ReplyStalled(_) => Code::DeadlineExceeded,
            RequestError::UnknownSession(_) => Code::NotFound,
            RequestError::PermissionDenied(_) | RequestError::Refused(_) => Code::PermissionDenied,
            RequestError::Unauthenticated(_) => Code::Unauthenticated,
            RequestError::Approval(refused) => {
                use toolgate_core::approvals::ResolveError;
                match refused {
                    ResolveError::NotFound(_) => Code::NotFound,
                    ResolveError::AlreadyAnswered(_) => Code::FailedPrecondition,
                    ResolveError::NotAllowed(_) | ResolveError::OwnApproval(_) => {
                        Code::PermissionDenied
                    }
                    ResolveError::RememberForbidden(_) => Code::FailedPrecondition,
                    ResolveError::ReasonTooLong(..) => Code::InvalidArgument,
                    ResolveError::StoreDown(_) => Code::Unavailable,
                }
            }
            RequestError::Remote(remote) => {
                use toolgate_remotes::RemoteError;
                match remote {
                    RemoteError::Invalid { .. } => Code::InvalidArgument,
                    RemoteError::Duplicate(_) | RemoteError::Registry { .. } => Code::AlreadyExists,
                    RemoteError::Unknown(_) => Code::NotFound,
                    RemoteError::Unreachable { .. } => Code::Unavailable,
                    RemoteError::NothingToAccept(_) | RemoteError::ChangedSinceReview { .. } => {
                        Code::FailedPrecondition
                    }
                }
            }
        };
        Status::new(code, error.to_string())
    }
}

/// Which request bytes bound was reached, and what helps.
fn request_backlog_text(full: &crate::front::budget::Full) -> String {
    use crate::front::budget::Full;
    match full {
        Full::Connection(n) => format!(
            "this connection's requests being received hold {n} bytes, its share (limits.max_buffered_request_bytes_per_connection); send fewer or smaller requests at once"
        ),
        Full::Server(n) => format!(
            "the server holds {n} bytes of requests being received (limits.max_buffered_request_bytes); retry later"
        ),
    }
}

/// Which reply bytes bound was reached, and what helps.
fn reply_backlog_text(full: &crate::front::budget::Full) -> String {
    use crate::front::budget::Full;
    match full {
        Full::Connection(n) => format!(
            "replies this connection has not read hold {n} bytes, its share (limits.max_unread_reply_bytes_per_connection); read the replies before sending more"
        ),
        Full::Server(n) => format!(
            "replies clients have not read hold {n} bytes (limits.max_unread_reply_bytes); retry later"
        ),
    }
}
