//! Granting and revoking ACLs on an authorizing cluster ([`SaslConfig::authorizer`](super::SaslConfig::authorizer)) through
//! the Admin API (`CreateAcls`, `DeleteAcls`), as the cluster's super user: a client of the
//! plaintext listener, whose principal `User:ANONYMOUS` the harness makes a super user.
//!
//! rust-rdkafka has no ACL calls, so these go through librdkafka's C API: each call makes
//! its own result queue, waits on it, and frees everything it allocated before returning.

use std::collections::HashSet;
use std::ffi::{c_char, CStr, CString};
use std::time::{Duration, Instant};

use kafka_eos::acl::{Acl, Operation, PatternType, ResourceType};
use rdkafka::admin::AdminClient;
use rdkafka::bindings as sys;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

use super::BrokerError;

/// How long an ACL call may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// ACL calls on one cluster, as its super user. See the [module docs](self).
pub struct AclAdmin {
    client: AdminClient<DefaultClientContext>,
}

impl AclAdmin {
    /// An admin client of `bootstrap` (the cluster's plaintext listener).
    pub fn new(bootstrap: &str) -> Result<AclAdmin, BrokerError> {
        let client = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("log_level", "3")
            .create()
            .map_err(|e| BrokerError::InvalidConfig(format!("ACL admin client for {bootstrap}: {e}")))?;
        Ok(AclAdmin { client })
    }

    /// Allows `principal` (e.g. `User:alice`) each of `acls`, from any host; returns once the
    /// broker that answers `DescribeAcls` lists them (the authorizer applies ACLs from the
    /// metadata log a moment after the controller accepts them; on a one-node cluster that
    /// broker is the only one).
    pub fn grant(&self, principal: &str, acls: &[Acl]) -> Result<(), BrokerError> {
        let bindings = Bindings::new(principal, acls, false)?;
        self.call(
            sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS,
            "CreateAcls",
            |rk, opts, queue| {
                // SAFETY: the bindings, options and queue are valid until after the result is read.
                unsafe {
                    sys::rd_kafka_CreateAcls(rk, bindings.ptrs.as_ptr() as *mut _, bindings.ptrs.len(), opts, queue)
                }
            },
            |event| {
                // SAFETY: `event` is a CreateAcls result event (checked by `call`).
                let errors = unsafe {
                    let result = sys::rd_kafka_event_CreateAcls_result(event);
                    let mut n = 0;
                    let results = sys::rd_kafka_CreateAcls_result_acls(result, &mut n);
                    (0..n).filter_map(|i| error_text(sys::rd_kafka_acl_result_error(*results.add(i)))).collect()
                };
                refusals(errors)
            },
        )?;
        self.wait_until(principal, "granted", |present| acls.iter().all(|a| present.contains(&key(a))))
    }

    /// Takes back from `principal` each of `acls` (those it was not granted are ignored);
    /// returns once the broker no longer lists them (see [`grant`](Self::grant)).
    pub fn revoke(&self, principal: &str, acls: &[Acl]) -> Result<(), BrokerError> {
        let filters = Bindings::new(principal, acls, true)?;
        self.call(
            sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DELETEACLS,
            "DeleteAcls",
            |rk, opts, queue| {
                // SAFETY: as in `grant`.
                unsafe {
                    sys::rd_kafka_DeleteAcls(rk, filters.ptrs.as_ptr() as *mut _, filters.ptrs.len(), opts, queue)
                }
            },
            |event| {
                // SAFETY: `event` is a DeleteAcls result event (checked by `call`).
                let errors = unsafe {
                    let result = sys::rd_kafka_event_DeleteAcls_result(event);
                    let mut n = 0;
                    let responses = sys::rd_kafka_DeleteAcls_result_responses(result, &mut n);
                    (0..n)
                        .filter_map(|i| error_text(sys::rd_kafka_DeleteAcls_result_response_error(*responses.add(i))))
                        .collect()
                };
                refusals(errors)
            },
        )?;
        self.wait_until(principal, "revoked", |present| acls.iter().all(|a| !present.contains(&key(a))))
    }

    /// Polls the ACLs the broker lists for `principal` until `done` holds of them.
    fn wait_until(&self, principal: &str, what: &str, done: impl Fn(&HashSet<Key>) -> bool) -> Result<(), BrokerError> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if done(&self.listed(principal)?) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(BrokerError::InvalidConfig(format!("ACLs of {principal} not {what} within {TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The ACLs the broker lists for `principal` (`DescribeAcls`).
    fn listed(&self, principal: &str) -> Result<HashSet<Key>, BrokerError> {
        let filter = Bindings::any_of(principal)?;
        self.call(
            sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBEACLS,
            "DescribeAcls",
            |rk, opts, queue| {
                // SAFETY: as in `grant`.
                unsafe { sys::rd_kafka_DescribeAcls(rk, filter.ptrs[0], opts, queue) }
            },
            |event| {
                // SAFETY: `event` is a DescribeAcls result event (checked by `call`); the
                // bindings it lists live as long as it.
                unsafe {
                    let result = sys::rd_kafka_event_DescribeAcls_result(event);
                    let mut n = 0;
                    let acls = sys::rd_kafka_DescribeAcls_result_acls(result, &mut n);
                    Ok((0..n)
                        .map(|i| {
                            let acl = *acls.add(i);
                            let name =
                                CStr::from_ptr(sys::rd_kafka_AclBinding_name(acl)).to_string_lossy().into_owned();
                            (
                                sys::rd_kafka_AclBinding_restype(acl) as u32,
                                name,
                                sys::rd_kafka_AclBinding_resource_pattern_type(acl) as u32,
                                sys::rd_kafka_AclBinding_operation(acl) as u32,
                            )
                        })
                        .collect())
                }
            },
        )
    }

    /// Runs one admin request: `start` sends it to a fresh queue, `read` reads its answer
    /// from the result event (`Err`: what the broker refused).
    fn call<T>(
        &self,
        op: sys::rd_kafka_admin_op_t,
        name: &str,
        start: impl FnOnce(*mut sys::rd_kafka_t, *mut sys::rd_kafka_AdminOptions_t, *mut sys::rd_kafka_queue_t),
        read: impl FnOnce(*mut sys::rd_kafka_event_t) -> Result<T, String>,
    ) -> Result<T, BrokerError> {
        let rk = self.client.inner().native_ptr();
        let failed = |what: String| BrokerError::InvalidConfig(format!("{name}: {what}"));
        // SAFETY: `rk` lives as long as `self.client`; every object made here is destroyed
        // below on every path, after the last use of what points into it.
        unsafe {
            let opts = sys::rd_kafka_AdminOptions_new(rk, op);
            let mut errstr = [0 as c_char; 512];
            let ms = TIMEOUT.as_millis() as i32;
            sys::rd_kafka_AdminOptions_set_request_timeout(opts, ms, errstr.as_mut_ptr(), errstr.len());
            let queue = sys::rd_kafka_queue_new(rk);
            start(rk, opts, queue);
            let deadline = Instant::now() + TIMEOUT + Duration::from_secs(5);
            let mut event: *mut sys::rd_kafka_event_t = std::ptr::null_mut();
            while event.is_null() && Instant::now() < deadline {
                event = sys::rd_kafka_queue_poll(queue, 1_000);
            }
            let outcome = if event.is_null() {
                Err(failed(format!("no answer within {TIMEOUT:?}")))
            } else if sys::rd_kafka_event_error(event) != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                Err(failed(CStr::from_ptr(sys::rd_kafka_event_error_string(event)).to_string_lossy().into_owned()))
            } else {
                read(event).map_err(failed)
            };
            if !event.is_null() {
                sys::rd_kafka_event_destroy(event);
            }
            sys::rd_kafka_queue_destroy(queue);
            sys::rd_kafka_AdminOptions_destroy(opts);
            outcome
        }
    }
}

/// An ACL as the broker lists it: resource type, name, pattern type and operation, in
/// librdkafka's codes.
type Key = (u32, String, u32, u32);

fn key(acl: &Acl) -> Key {
    (
        resource_type(acl.resource_type) as u32,
        acl.name.clone(),
        pattern_type(acl.pattern_type) as u32,
        operation(acl.operation) as u32,
    )
}

/// `Err` with the refusals joined, if any.
fn refusals(errors: Vec<String>) -> Result<(), String> {
    match errors.is_empty() {
        true => Ok(()),
        false => Err(errors.join("; ")),
    }
}

/// librdkafka's ACL bindings (or binding filters) for `acls`, freed on drop.
struct Bindings {
    ptrs: Vec<*mut sys::rd_kafka_AclBinding_t>,
}

impl Bindings {
    fn new(principal: &str, acls: &[Acl], filters: bool) -> Result<Bindings, BrokerError> {
        let text = |s: &str| CString::new(s).map_err(|_| BrokerError::InvalidConfig(format!("{s:?} holds a NUL byte")));
        let (principal, host) = (text(principal)?, text("*")?);
        let mut out = Bindings { ptrs: Vec::with_capacity(acls.len()) };
        for acl in acls {
            let name = text(&acl.name)?;
            let mut errstr = [0 as c_char; 512];
            let args = (resource_type(acl.resource_type), pattern_type(acl.pattern_type), operation(acl.operation));
            let allow = sys::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW;
            // SAFETY: the strings outlive the call, which copies them.
            let ptr = unsafe {
                let new = if filters { sys::rd_kafka_AclBindingFilter_new } else { sys::rd_kafka_AclBinding_new };
                new(
                    args.0,
                    name.as_ptr(),
                    args.1,
                    principal.as_ptr(),
                    host.as_ptr(),
                    args.2,
                    allow,
                    errstr.as_mut_ptr(),
                    errstr.len(),
                )
            };
            if ptr.is_null() {
                // SAFETY: librdkafka wrote a NUL-terminated message into `errstr`.
                let why = unsafe { CStr::from_ptr(errstr.as_ptr()) }.to_string_lossy().into_owned();
                return Err(BrokerError::InvalidConfig(format!("ACL {acl}: {why}")));
            }
            out.ptrs.push(ptr);
        }
        Ok(out)
    }
}

impl Bindings {
    /// The filter of every ACL of `principal`.
    fn any_of(principal: &str) -> Result<Bindings, BrokerError> {
        let principal = CString::new(principal)
            .map_err(|_| BrokerError::InvalidConfig(format!("{principal:?} holds a NUL byte")))?;
        let mut errstr = [0 as c_char; 512];
        // SAFETY: as in `new`; null name and host match any.
        let ptr = unsafe {
            sys::rd_kafka_AclBindingFilter_new(
                sys::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_ANY,
                std::ptr::null(),
                sys::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_ANY,
                principal.as_ptr(),
                std::ptr::null(),
                sys::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_ANY,
                sys::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
                errstr.as_mut_ptr(),
                errstr.len(),
            )
        };
        if ptr.is_null() {
            // SAFETY: librdkafka wrote a NUL-terminated message into `errstr`.
            let why = unsafe { CStr::from_ptr(errstr.as_ptr()) }.to_string_lossy().into_owned();
            return Err(BrokerError::InvalidConfig(format!("ACL filter: {why}")));
        }
        Ok(Bindings { ptrs: vec![ptr] })
    }
}

impl Drop for Bindings {
    fn drop(&mut self) {
        // SAFETY: every pointer came from rd_kafka_AclBinding(Filter)_new and is freed once.
        unsafe { sys::rd_kafka_AclBinding_destroy_array(self.ptrs.as_mut_ptr(), self.ptrs.len()) }
    }
}

/// The message of an `rd_kafka_error_t`, `None` for no error.
///
/// # Safety
/// `err` is null or a valid error object.
unsafe fn error_text(err: *const sys::rd_kafka_error_t) -> Option<String> {
    (!err.is_null()).then(|| unsafe { CStr::from_ptr(sys::rd_kafka_error_string(err)) }.to_string_lossy().into_owned())
}

fn resource_type(t: ResourceType) -> sys::rd_kafka_ResourceType_t {
    use sys::rd_kafka_ResourceType_t as R;
    match t {
        ResourceType::Topic => R::RD_KAFKA_RESOURCE_TOPIC,
        ResourceType::Group => R::RD_KAFKA_RESOURCE_GROUP,
        ResourceType::TransactionalId => R::RD_KAFKA_RESOURCE_TRANSACTIONAL_ID,
        // librdkafka's BROKER is the protocol's resource type 4, Kafka's CLUSTER.
        ResourceType::Cluster => R::RD_KAFKA_RESOURCE_BROKER,
        _ => R::RD_KAFKA_RESOURCE_UNKNOWN,
    }
}

fn pattern_type(p: PatternType) -> sys::rd_kafka_ResourcePatternType_t {
    use sys::rd_kafka_ResourcePatternType_t as P;
    match p {
        PatternType::Literal => P::RD_KAFKA_RESOURCE_PATTERN_LITERAL,
        PatternType::Prefixed => P::RD_KAFKA_RESOURCE_PATTERN_PREFIXED,
    }
}

fn operation(o: Operation) -> sys::rd_kafka_AclOperation_t {
    use sys::rd_kafka_AclOperation_t as O;
    match o {
        Operation::Read => O::RD_KAFKA_ACL_OPERATION_READ,
        Operation::Write => O::RD_KAFKA_ACL_OPERATION_WRITE,
        Operation::Create => O::RD_KAFKA_ACL_OPERATION_CREATE,
        Operation::Delete => O::RD_KAFKA_ACL_OPERATION_DELETE,
        Operation::Describe => O::RD_KAFKA_ACL_OPERATION_DESCRIBE,
        Operation::DescribeConfigs => O::RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
        Operation::IdempotentWrite => O::RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE,
        _ => O::RD_KAFKA_ACL_OPERATION_UNKNOWN,
    }
}
