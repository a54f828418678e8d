//! The registry's rules: who sees and answers an approval, once; expiry and withdrawal.

use super::*;
use crate::identity::Caller;
use serde_json::json;

fn caller(id: &str, tenant: &str, roles: &[Role]) -> Arc<Caller> {
    Arc::new(Caller {
        id: id.to_owned(),
        tenant: tenant.to_owned(),
        roles: roles.to_vec(),
        method: Method::Token,
    })
}

fn request(from: &Arc<Caller>, session: &str, wait: Duration) -> Request {
    Request {
        caller: from.clone(),
        session_id: session.to_owned(),
        index: 0,
        call_id: "c1".to_owned(),
        tool: "write_file".to_owned(),
        arguments: json!({"path": "/etc/x"}),
        reason: "writes outside the workspace".to_owned(),
        source: "rules[0]".to_owned(),
        until: Instant::now() + wait,
    }
}

fn answer(approve: bool, by: &str) -> Answer {
    Answer {
        approve,
        by: by.to_owned(),
        reason: "ok".to_owned(),
        updated_arguments: None,
        remember: Remember::Once,
    }
}

#[tokio::test]
async fn an_approver_answers_once_and_the_waiter_gets_the_answer() {
    let approvals = Approvals::default();
    let agent = caller("bot", "acme", &[Role::Agent]);
    let alice = caller("alice", "acme", &[Role::Approver]);
    let mut updates = approvals.subscribe();
    let mut ticket = approvals
        .open(&request(&agent, "s1", Duration::from_secs(60)))
        .await
        .unwrap();
    let id = ticket.approval().id.clone();
    assert_eq!(id.len(), 32);
    assert!(matches!(updates.recv().await.unwrap(), Update::Requested(a) if a.id == id));
    assert_eq!(approvals.list(&agent, None).len(), 1);
    assert_eq!(approvals.list(&agent, Some("other")).len(), 0);

    // The sender sees it but may not answer it: an ask the asker answers is no gate.
    assert_eq!(
        approvals.resolve(&agent, &id, answer(true, "bot")),
        Err(ResolveError::OwnApproval(id.clone()))
    );
    let answered = approvals
        .resolve(&alice, &id, answer(true, "alice"))
        .unwrap();
    assert_eq!(answered.tool, "write_file");
    assert!(matches!(ticket.wait().await, Waited::Answered(a) if a.approve));
    assert_eq!(
        approvals.resolve(&alice, &id, answer(false, "alice")),
        Err(ResolveError::AlreadyAnswered(id.clone()))
    );
    let Update::Ended(ended) = updates.recv().await.unwrap() else {
        panic!("an end")
    };
    assert_eq!((ended.how, ended.approved), (How::Answered, Some(true)));
    assert!(approvals.list(&agent, None).is_empty());
}

#[tokio::test]
async fn who_may_see_and_answer() {
    let approvals = Approvals::default();
    let agent = caller("bot", "acme", &[Role::Agent]);
    let ticket = approvals
        .open(&request(&agent, "s1", Duration::from_secs(60)))
        .await
        .unwrap();
    let id = ticket.approval().id.clone();
    let peer = caller("other-bot", "acme", &[Role::Agent]);
    let approver = caller("alice", "acme", &[Role::Approver]);
    let admin = caller("root", "acme", &[Role::Admin]);
    let stranger = caller("eve", "globex", &[Role::Approver, Role::Admin]);
    // The same name through another kind of credential is another identity.
    let mut jwt = (*agent).clone();
    jwt.method = Method::Jwt;

    for nobody in [&peer, &Arc::new(jwt)] {
        assert!(approvals.list(nobody, None).is_empty());
        assert_eq!(
            approvals.resolve(nobody, &id, answer(true, "x")),
            Err(ResolveError::NotAllowed(id.clone()))
        );
    }
    assert!(approvals.list(&stranger, None).is_empty());
    assert_eq!(
        approvals.resolve(&stranger, &id, answer(true, "eve")),
        Err(ResolveError::NotFound(id.clone()))
    );
    assert!(!Update::Requested(ticket.approval().clone()).visible_to(&stranger));
    for allowed in [&approver, &admin] {
        assert_eq!(approvals.list(allowed, None).len(), 1);
        assert!(Update::Requested(ticket.approval().clone()).visible_to(allowed));
    }
    assert!(
        approvals
            .resolve(&approver, &id, answer(false, "alice"))
            .is_ok()
    );
    assert_eq!(
        approvals.resolve(&admin, "0123", answer(true, "root")),
        Err(ResolveError::NotFound("0123".to_owned()))
    );
}

#[tokio::test]
async fn the_sender_answers_and_answers_are_remembered_only_where_the_rule_lets_it() {
    let mut policies = AskPolicies::new(AskPolicy::default());
    let terminal = AskPolicy {
        requester_may_answer: true,
        remember: false,
    };
    policies.set("terminal", terminal);
    // Two rules under one name: the stricter wins.
    policies.set("twice", terminal);
    policies.set("twice", AskPolicy::default());
    assert_eq!(
        policies.of("twice"),
        AskPolicy {
            requester_may_answer: false,
            remember: false
        }
    );
    let approvals = Approvals::with_policies(Duration::from_secs(300), policies);
    let agent = caller("bot", "acme", &[Role::Agent]);
    let alice = caller("alice", "acme", &[Role::Approver]);
    let asked = |source: &str| Request {
        source: source.to_owned(),
        ..request(&agent, "s1", Duration::from_secs(60))
    };
    let session = |approve| Answer {
        remember: Remember::Session,
        ..answer(approve, "bot")
    };

    let ticket = approvals.open(&asked("terminal")).await.unwrap();
    let (id, approval) = (ticket.approval().id.clone(), ticket.approval().clone());
    assert!(approval.requester_may_answer && !approval.remember_allowed);
    for who in [&agent, &alice] {
        assert_eq!(
            approvals.resolve(who, &id, session(true)),
            Err(ResolveError::RememberForbidden(id.clone()))
        );
    }
    assert!(approvals.resolve(&agent, &id, answer(true, "bot")).is_ok());

    let ticket = approvals.open(&asked("rules[0]")).await.unwrap();
    let id = ticket.approval().id.clone();
    assert!(!ticket.approval().requester_may_answer && ticket.approval().remember_allowed);
    assert_eq!(
        approvals.resolve(&agent, &id, session(true)),
        Err(ResolveError::OwnApproval(id.clone()))
    );
    assert!(approvals.resolve(&alice, &id, session(true)).is_ok());
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_approval_expires_and_is_then_not_found() {
    let approvals = Approvals::default();
    let agent = caller("bot", "acme", &[Role::Agent]);
    let mut ticket = approvals
        .open(&request(&agent, "s1", Duration::from_secs(5)))
        .await
        .unwrap();
    let id = ticket.approval().id.clone();
    let mut updates = approvals.subscribe();
    assert!(matches!(ticket.wait().await, Waited::Expired));
    assert_eq!(
        approvals.resolve(&agent, &id, answer(true, "bot")),
        Err(ResolveError::NotFound(id.clone()))
    );
    assert!(matches!(updates.recv().await.unwrap(), Update::Ended(e) if e.how == How::Expired));
    drop(ticket);
    assert!(updates.try_recv().is_err(), "announced once");
}

#[tokio::test]
async fn a_dropped_ticket_withdraws_its_approval() {
    let approvals = Approvals::default();
    let agent = caller("bot", "acme", &[Role::Agent]);
    let ticket = approvals
        .open(&request(&agent, "s1", Duration::from_secs(60)))
        .await
        .unwrap();
    let id = ticket.approval().id.clone();
    let mut updates = approvals.subscribe();
    drop(ticket);
    assert_eq!(approvals.pending(), 0);
    assert!(matches!(updates.recv().await.unwrap(), Update::Ended(e) if e.how == How::Withdrawn));
    assert_eq!(
        approvals.resolve(&agent, &id, answer(true, "bot")),
        Err(ResolveError::NotFound(id))
    );
}

#[test]
fn answered_ids_are_bounded() {
    let mut state = State::default();
    let start = Instant::now();
    for i in 0..MAX_ANSWERED + 10 {
        state.note_answered(i.to_string(), start);
    }
    assert_eq!(state.answered.len(), MAX_ANSWERED);
    assert_eq!(state.answered_ids.len(), MAX_ANSWERED);
    state.note_answered(
        "late".to_owned(),
        start + ANSWERED_KEPT + Duration::from_secs(1),
    );
    assert_eq!(state.answered.len(), 1);
}

/// A relay kept in memory that never delivers a message: what a server sees when the pub/sub
/// message with its answer was lost.
#[derive(Default)]
struct Deaf {
    pending: Mutex<HashMap<String, Approval>>,
    answered: Mutex<HashMap<String, Answer>>,
    /// How many approvals were read whole by a listing.
    read_whole: Mutex<usize>,
}

impl ApprovalRelay for Deaf {
    fn open<'a>(&'a self, approval: &'a Approval) -> BoxFuture<'a, Result<(), StoreError>> {
        self.pending
            .lock()
            .insert(approval.id.clone(), approval.clone());
        Box::pin(async { Ok(()) })
    }
    fn peek<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Approval>, StoreError>> {
        let found = self.pending.lock().get(id).cloned();
        Box::pin(async move { Ok(found) })
    }
    fn claim<'a>(
        &'a self,
        approval: &'a Approval,
        answer: Option<&'a Answer>,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let claim = if self.pending.lock().remove(&approval.id).is_some() {
            if let Some(answer) = answer {
                self.answered
                    .lock()
                    .insert(approval.id.clone(), answer.clone());
            }
            Claim::Claimed
        } else if self.answered.lock().contains_key(&approval.id) {
            Claim::Answered
        } else {
            Claim::Missing
        };
        Box::pin(async move { Ok(claim) })
    }
    fn answered<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Answer>, StoreError>> {
        let found = self.answered.lock().get(id).cloned();
        Box::pin(async move { Ok(found) })
    }
    fn pending<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, Result<Vec<Previewed>, StoreError>> {
        let found = self
            .pending
            .lock()
            .values()
            .filter(|a| a.tenant == tenant)
            .map(Previewed::of)
            .collect();
        Box::pin(async move { Ok(found) })
    }
    fn whole<'a>(
        &'a self,
        ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Option<Approval>>, StoreError>> {
        *self.read_whole.lock() += ids.len();
        let pending = self.pending.lock();
        let found = ids.iter().map(|id| pending.get(id).cloned()).collect();
        Box::pin(async move { Ok(found) })
    }
    fn publish<'a>(&'a self, _message: &'a Relayed) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
    fn remembered<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<bool>, StoreError>> {
        Box::pin(async { Ok(None) })
    }
    fn remember<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a str,
        _: &'a str,
        _: bool,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test(start_paused = true)]
async fn an_answer_whose_message_was_lost_is_found_in_the_store() {
    let relay = Arc::new(Deaf::default());
    let (here, there) = (Approvals::default(), Approvals::default());
    here.attach(relay.clone());
    there.attach(relay.clone());
    let agent = caller("bot", "acme", &[Role::Agent]);
    let alice = caller("alice", "acme", &[Role::Approver]);
    let mut ticket = here
        .open(&request(&agent, "s1", Duration::from_secs(60)))
        .await
        .unwrap();
    let id = ticket.approval().id.clone();
    // The other server lists and answers it; no message reaches this one.
    assert_eq!(
        there
            .list_anywhere(
                &agent,
                &Listing {
                    whole_bytes: usize::MAX,
                    ..Listing::default()
                }
            )
            .await
            .unwrap()
            .len(),
        1
    );
    there
        .resolve_anywhere(&alice, &id, answer(true, "bot"))
        .await
        .unwrap();
    let started = Instant::now();
    assert!(matches!(ticket.wait().await, Waited::Answered(a) if a.approve));
    assert!(started.elapsed() <= POLL, "found at the next poll");
    assert_eq!(here.pending(), 0);
    assert_eq!(
        here.resolve_anywhere(&alice, &id, answer(false, "bot"))
            .await,
        Err(ResolveError::AlreadyAnswered(id))
    );
}

#[tokio::test(start_paused = true)]
async fn a_listing_of_the_other_servers_approvals_reads_whole_only_what_it_carries() {
    let relay = Arc::new(Deaf::default());
    let (here, there) = (Approvals::default(), Approvals::default());
    here.attach(relay.clone());
    there.attach(relay.clone());
    let agent = caller("bot", "acme", &[Role::Agent]);
    let mut tickets = Vec::new();
    for n in 0..10 {
        let mut asked = request(&agent, "s1", Duration::from_secs(60 + n));
        asked.arguments = json!({"content": "x".repeat(100_000), "n": n});
        tickets.push(here.open(&asked).await.unwrap());
    }
    let whole = json::held_bytes(&tickets[0].approval().arguments);
    let listing = Listing {
        whole_bytes: 2 * whole + whole / 2,
        ..Listing::default()
    };
    let listed = there.list_anywhere(&agent, &listing).await.unwrap();
    assert_eq!(listed.len(), 10);
    // The two oldest whole, the rest previews; only those two were read whole.
    let cut: Vec<bool> = listed.iter().map(|a| a.arguments_cut).collect();
    assert_eq!(cut, [[false; 2].as_slice(), &[true; 8]].concat());
    assert_eq!(listed[0].arguments, tickets[0].approval().arguments);
    assert_eq!(*relay.read_whole.lock(), 2);
    // Previews only: nothing is read whole.
    let listed = there
        .list_anywhere(&agent, &Listing::default())
        .await
        .unwrap();
    assert!(listed.iter().all(|a| a.arguments_cut));
    assert_eq!(*relay.read_whole.lock(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_answer_given_as_it_expires_wins_and_an_expired_one_is_not_answered() {
    let relay = Arc::new(Deaf::default());
    let (here, there) = (Approvals::default(), Approvals::default());
    here.attach(relay.clone());
    there.attach(relay.clone());
    let agent = caller("bot", "acme", &[Role::Agent]);
    let alice = caller("alice", "acme", &[Role::Approver]);
    let mut ticket = here
        .open(&request(&agent, "s1", Duration::from_secs(1)))
        .await
        .unwrap();
    let id = ticket.approval().id.clone();
    there
        .resolve_anywhere(&alice, &id, answer(false, "bot"))
        .await
        .unwrap();
    // Its expiry comes before the first poll: the claim finds the answer.
    assert!(matches!(ticket.wait().await, Waited::Answered(a) if !a.approve));

    let mut ticket = here
        .open(&request(&agent, "s2", Duration::from_secs(1)))
        .await
        .unwrap();
    let id = ticket.approval().id.clone();
    assert!(matches!(ticket.wait().await, Waited::Expired));
    assert_eq!(
        there
            .resolve_anywhere(&alice, &id, answer(true, "bot"))
            .await,
        Err(ResolveError::NotFound(id))
    );
}

#[test]
fn watchers_are_bounded_and_shared_between_tenants_and_identities() {
    let approvals = Approvals::default();
    let agent = caller("bot", "acme", &[Role::Agent]);
    let approver = caller("alice", "acme", &[Role::Approver]);
    // One identity holds its share at most, whatever else is open: its tenant's approver
    // still watches.
    let mut held: Vec<_> = (0..IDENTITY_WATCHES)
        .map(|_| approvals.watch_slot(&agent).unwrap())
        .collect();
    assert_eq!(
        approvals.watch_slot(&agent).err(),
        Some(WatchesFull::Identity(IDENTITY_WATCHES))
    );
    held.push(approvals.watch_slot(&approver).unwrap());
    // A tenant holds its share once the server is half full.
    let mut n = 0;
    while approvals.inner.watchers.lock().total < MAX_WATCHES / 2 {
        held.push(
            approvals
                .watch_slot(&caller(&format!("b{n}"), "acme", &[]))
                .unwrap(),
        );
        n += 1;
    }
    assert_eq!(
        approvals.watch_slot(&caller("late", "acme", &[])).err(),
        Some(WatchesFull::Tenant(TENANT_WATCHES))
    );
    // Other tenants, up to the server's bound.
    let others: Vec<_> = (0..MAX_WATCHES - held.len())
        .map(|n| {
            approvals
                .watch_slot(&caller(&format!("a{n}"), &format!("t{n}"), &[]))
                .unwrap()
        })
        .collect();
    assert_eq!(
        approvals.watch_slot(&caller("late", "late", &[])).err(),
        Some(WatchesFull::Server(MAX_WATCHES))
    );
    // Places come back as their watchers leave.
    drop(others);
    drop(held);
    assert!(approvals.inner.watchers.lock().tenants.is_empty());
    assert!(approvals.watch_slot(&agent).is_ok());
}

#[test]
fn watchers_are_sent_a_bounded_preview_of_large_arguments() {
    let approvals = Approvals::default();
    let mut updates = approvals.subscribe();
    let agent = caller("bot", "acme", &[Role::Agent]);
    let big = Request {
        arguments: json!({"text": "x".repeat(3_000_000)}),
        ..request(&agent, "s1", Duration::from_secs(60))
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let ticket = runtime.block_on(approvals.open(&big)).unwrap();
    assert!(
        !ticket.approval().arguments_cut,
        "the batch keeps them whole"
    );
    let Ok(Update::Requested(sent)) = updates.try_recv() else {
        panic!("a request")
    };
    assert!(sent.arguments_cut);
    let text = sent.arguments.as_str().unwrap();
    assert!(text.len() <= PREVIEW_BYTES + 3 && text.starts_with(r#"{"text":"xxx"#));
    // Small arguments go whole.
    let small = runtime
        .block_on(approvals.open(&request(&agent, "s2", Duration::from_secs(60))))
        .unwrap();
    let Ok(Update::Requested(sent)) = updates.try_recv() else {
        panic!("a request")
    };
    assert_eq!(sent.arguments, small.approval().arguments);
    assert!(!sent.arguments_cut);
}
