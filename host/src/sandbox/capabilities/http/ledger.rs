//! Every byte the host keeps for a guest's `wasi:http` resources is charged to the guest.
//!
//! A guest makes the host hold memory without sending anything: header maps (`fields`), the
//! path and authority of a request, the channel an outgoing body is written into, responses it
//! never reads. wasmtime-wasi-http keeps all of it in the store's resource table, uncounted, so
//! the imports are served here by [`Charged`], which calls wasmtime-wasi-http's own
//! implementation and then books what the resource now holds (an estimate from above) against
//! the guest's HTTP memory (`Budget::http_memory`, a quarter of `limits.memoryMiB` over all its
//! instances) and against the instance's own limit. A call that would go over traps the
//! instance with a message naming both figures: the host never holds the bytes first.
//!
//! What is booked where:
//! - a `fields`, or the `headers` of a request or response: its names and values;
//! - an outgoing request or response: its headers, path and authority, and once it has a body,
//!   the body's channel ([`BODY_CHANNEL`]); on `handle` the request's charge moves to the future
//!   of its response, which holds the request until the exchange ends;
//! - a response: its headers here; its body carries its own hold ([`super::Exchanger`]), given
//!   back when the guest drops the body;
//! - every other resource: [`ENTRY`].
//!
//! wasi:io's streams and pollables are not booked; the resource table's capacity
//! ([`MAX_RESOURCES`]) bounds them.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{HasData, Resource};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable};
use wasmtime_wasi_http::p2::bindings::http::{outgoing_handler, types};
use wasmtime_wasi_http::p2::body::{HostFutureTrailers, HostIncomingBody, HostOutgoingBody};
use wasmtime_wasi_http::p2::types::{
    HostFutureIncomingResponse, HostIncomingRequest, HostIncomingResponse, HostOutgoingRequest,
    HostOutgoingResponse, HostResponseOutparam,
};
use wasmtime_wasi_http::p2::{HeaderError, HeaderResult, HttpError, HttpResult};
use wasmtime_wasi_http::{FieldMap, WasiHttpCtxView};

/// Bytes booked for any resource beside its contents: the table entry, its box, a map's index.
pub(crate) const ENTRY: usize = 256;
/// Bytes of one slot of a header map (its entry, its index, its link), full or not.
const SLOT: usize = 128;
/// The most bytes a guest may write into an outgoing body's stream in one call.
pub(crate) const BODY_CHUNK: usize = 16 << 10;
/// What an outgoing body's channel holds at most before the host reads it: wasmtime-wasi-http
/// keeps one chunk buffered and one more in flight.
pub(crate) const BODY_CHANNEL: usize = 2 * BODY_CHUNK;
/// Entries of an instance's resource table (WASI streams, pollables and the HTTP resources):
/// a guest that keeps more is refused the next one.
pub(crate) const MAX_RESOURCES: usize = 1024;
/// What one instance of a guest whose grant has no `http:` rule may hold in `wasi:http`
/// resources: enough to build a request and be told it is denied, nothing more.
pub(crate) const WITHOUT_RULES: usize = 64 << 10;

/// One instance's bookings: each live resource's charge, held from the guest's HTTP memory.
pub(crate) struct Ledger {
    guest: String,
    pool: Arc<Semaphore>,
    pool_kib: usize,
    /// What this instance may hold, in KiB (a guest without rules: [`WITHOUT_RULES`]).
    limit_kib: usize,
    without_rules: bool,
    held_kib: usize,
    charges: HashMap<u32, Charge>,
}

struct Charge {
    kib: usize,
    permit: Option<OwnedSemaphorePermit>,
}

impl Ledger {
    /// Bookings against `pool` (KiB permits, `pool_kib` of them); an instance of a guest
    /// whose grant has no `http:` rule holds at most [`WITHOUT_RULES`].
    pub(crate) fn new(guest: &str, pool: Arc<Semaphore>, pool_kib: usize, rules: bool) -> Self {
        let limit = if rules { usize::MAX } else { WITHOUT_RULES };
        Self {
            guest: guest.to_owned(),
            pool,
            pool_kib,
            limit_kib: limit.div_ceil(1024),
            without_rules: !rules,
            held_kib: 0,
            charges: HashMap::new(),
        }
    }

    /// What the instance holds, in bytes (rounded up to KiB per resource).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held_kib * 1024
    }

    /// Books `bytes` for resource `rep`, replacing what it held; refused (nothing changes)
    /// beyond the instance's limit or the guest's HTTP memory.
    fn set(&mut self, rep: u32, bytes: usize) -> wasmtime::Result<()> {
        let kib = bytes.div_ceil(1024);
        let had = self.charges.get(&rep).map_or(0, |c| c.kib);
        if kib <= had {
            let freed = had - kib;
            if let Some(charge) = self.charges.get_mut(&rep) {
                if freed > 0
                    && let Some(permit) = charge.permit.as_mut()
                {
                    drop(permit.split(freed));
                }
                charge.kib = kib;
            }
            self.held_kib -= freed;
            return Ok(());
        }
        let more = kib - had;
        if self.held_kib + more > self.limit_kib {
            let why = if self.without_rules {
                format!(
                    "its grant has no http: rule, so an instance may hold {} KiB",
                    self.limit_kib
                )
            } else {
                format!("an instance may hold {} KiB", self.limit_kib)
            };
            return Err(self.refusal(more, &why));
        }
        let taken = u32::try_from(more)
            .ok()
            .and_then(|n| self.pool.clone().try_acquire_many_owned(n).ok())
            .ok_or_else(|| {
                let why = format!(
                    "its HTTP memory ({} KiB, a quarter of limits.memoryMiB, over all its \
                     reconciles) is held",
                    self.pool_kib
                );
                self.refusal(more, &why)
            })?;
        let charge = self.charges.entry(rep).or_insert(Charge {
            kib: 0,
            permit: None,
        });
        match charge.permit.as_mut() {
            Some(permit) => permit.merge(taken),
            None => charge.permit = Some(taken),
        }
        charge.kib = kib;
        self.held_kib += more;
        Ok(())
    }

    /// Books `bytes` for `rep` if that is more than it holds; never less.
    fn grow(&mut self, rep: u32, bytes: usize) -> wasmtime::Result<()> {
        let had = self.charges.get(&rep).map_or(0, |c| c.kib);
        if bytes.div_ceil(1024) > had {
            self.set(rep, bytes)
        } else {
            Ok(())
        }
    }

    fn refusal(&self, more: usize, why: &str) -> wasmtime::Error {
        wasmtime::format_err!(
            "guest `{}` would hold {} KiB of wasi:http resources (header maps, request bodies, \
             responses it keeps): {why}; drop the resources it no longer needs",
            self.guest,
            self.held_kib + more
        )
    }

    /// Gives back what `rep` held.
    fn release(&mut self, rep: u32) {
        if let Some(charge) = self.charges.remove(&rep) {
            self.held_kib -= charge.kib;
        }
    }

    /// Moves `from`'s charge onto `to` (a resource consumed into another).
    fn transfer(&mut self, from: u32, to: u32) {
        let Some(moved) = self.charges.remove(&from) else {
            return;
        };
        if let Some(stale) = self.charges.remove(&to) {
            self.held_kib -= stale.kib;
        }
        self.charges.insert(to, moved);
    }
}

/// Bytes of a header map's names and values, and its entry.
/// (A map's slots are counted whether full or not: an emptied map keeps its allocation.)
fn map_bytes(map: &HeaderMap) -> usize {
    let names: usize = map
        .keys()
        .map(|k| k.as_str().len() + size_of::<http::HeaderName>())
        .sum();
    let values: usize = map
        .values()
        .map(|v| v.len() + size_of::<http::HeaderValue>())
        .sum();
    ENTRY + names + values + map.capacity() * SLOT
}

fn request_bytes(request: &HostOutgoingRequest) -> usize {
    map_bytes(&request.headers)
        + request.path_with_query.as_ref().map_or(0, String::len)
        + request.authority.as_ref().map_or(0, String::len)
        + if request.body.is_some() {
            BODY_CHANNEL
        } else {
            0
        }
}

fn response_bytes(response: &HostOutgoingResponse) -> usize {
    map_bytes(&response.headers)
        + if response.body.is_some() {
            BODY_CHANNEL
        } else {
            0
        }
}

/// wasmtime-wasi-http's view with the instance's ledger: what the linker serves `wasi:http`
/// through.
pub(crate) struct Charged<'a> {
    pub(crate) http: WasiHttpCtxView<'a>,
    pub(crate) ledger: &'a mut Ledger,
}

/// Names [`Charged`] for the generated `add_to_linker` functions.
pub(crate) struct ChargedHttp;

impl HasData for ChargedHttp {
    type Data<'a> = Charged<'a>;
}

impl Charged<'_> {
    /// Books a changed header map at the most it has held: a map keeps what it allocated
    /// when values are deleted or replaced by shorter ones.
    fn fields(&mut self, rep: u32) -> wasmtime::Result<()> {
        let bytes = self
            .http
            .table
            .get(&Resource::<FieldMap>::new_own(rep))
            .map_or(ENTRY, |f| map_bytes(f));
        self.ledger.grow(rep, bytes)
    }

    fn request(&mut self, rep: u32) -> wasmtime::Result<()> {
        let bytes = self
            .http
            .table
            .get(&Resource::<HostOutgoingRequest>::new_own(rep))
            .map_or(ENTRY, request_bytes);
        self.ledger.set(rep, bytes)
    }

    fn response(&mut self, rep: u32) -> wasmtime::Result<()> {
        let bytes = self
            .http
            .table
            .get(&Resource::<HostOutgoingResponse>::new_own(rep))
            .map_or(ENTRY, response_bytes);
        self.ledger.set(rep, bytes)
    }

    /// Books `bytes` for a resource just made; on refusal the resource is deleted again, so
    /// the host never keeps what it did not book.
    fn made<T: 'static>(
        &mut self,
        made: Resource<T>,
        bytes: usize,
    ) -> wasmtime::Result<Resource<T>> {
        let rep = made.rep();
        match self.ledger.set(rep, bytes) {
            Ok(()) => Ok(made),
            Err(e) => {
                let _ = self.http.table.delete(made);
                Err(e)
            }
        }
    }

    fn made_fields(&mut self, made: Resource<FieldMap>) -> wasmtime::Result<Resource<FieldMap>> {
        let bytes = self.http.table.get(&made).map_or(ENTRY, |f| map_bytes(f));
        self.made(made, bytes)
    }
}

/// A change to a mutable resource, booked afterwards; refused, it is undone.
fn header_result<T>(result: wasmtime::Result<T>) -> HeaderResult<T> {
    result.map_err(HeaderError::trap)
}

impl types::Host for Charged<'_> {
    fn convert_error_code(&mut self, err: HttpError) -> wasmtime::Result<types::ErrorCode> {
        self.http.convert_error_code(err)
    }

    fn convert_header_error(&mut self, err: HeaderError) -> wasmtime::Result<types::HeaderError> {
        self.http.convert_header_error(err)
    }

    fn http_error_code(
        &mut self,
        err: Resource<types::IoError>,
    ) -> wasmtime::Result<Option<types::ErrorCode>> {
        self.http.http_error_code(err)
    }
}

impl types::HostFields for Charged<'_> {
    fn new(&mut self) -> wasmtime::Result<Resource<FieldMap>> {
        let made = types::HostFields::new(&mut self.http)?;
        self.made(made, ENTRY)
    }

    fn from_list(&mut self, entries: Vec<(String, Vec<u8>)>) -> HeaderResult<Resource<FieldMap>> {
        // Refused before the map is built when the list alone is over the limit.
        let listed: usize = entries.iter().map(|(n, v)| n.len() + v.len() + 64).sum();
        let most = self.ledger.limit_kib.min(self.ledger.pool_kib);
        if listed > most.saturating_mul(1024) {
            return Err(HeaderError::trap(wasmtime::format_err!(
                "guest `{}` asked for a header map of {listed} bytes, more than the {} KiB of \
                 wasi:http resources an instance may hold",
                self.ledger.guest,
                most
            )));
        }
        let made = self.http.from_list(entries)?;
        header_result(self.made_fields(made))
    }

    fn drop(&mut self, fields: Resource<FieldMap>) -> wasmtime::Result<()> {
        self.ledger.release(fields.rep());
        types::HostFields::drop(&mut self.http, fields)
    }

    fn get(&mut self, fields: Resource<FieldMap>, name: String) -> wasmtime::Result<Vec<Vec<u8>>> {
        self.http.get(fields, name)
    }

    fn has(&mut self, fields: Resource<FieldMap>, name: String) -> wasmtime::Result<bool> {
        self.http.has(fields, name)
    }

    fn set(
        &mut self,
        fields: Resource<FieldMap>,
        name: String,
        values: Vec<Vec<u8>>,
    ) -> HeaderResult<()> {
        let rep = fields.rep();
        let before = self.snapshot(rep);
        self.http.set(fields, name, values)?;
        self.booked_or_restored(rep, before)
    }

    fn delete(&mut self, fields: Resource<FieldMap>, name: String) -> HeaderResult<()> {
        let rep = fields.rep();
        types::HostFields::delete(&mut self.http, fields, name)?;
        header_result(self.fields(rep))
    }

    fn append(
        &mut self,
        fields: Resource<FieldMap>,
        name: String,
        value: Vec<u8>,
    ) -> HeaderResult<()> {
        let rep = fields.rep();
        let before = self.snapshot(rep);
        self.http.append(fields, name, value)?;
        self.booked_or_restored(rep, before)
    }

    fn entries(&mut self, fields: Resource<FieldMap>) -> wasmtime::Result<Vec<(String, Vec<u8>)>> {
        self.http.entries(fields)
    }

    fn clone(&mut self, fields: Resource<FieldMap>) -> wasmtime::Result<Resource<FieldMap>> {
        let made = types::HostFields::clone(&mut self.http, fields)?;
        self.made_fields(made)
    }
}

impl Charged<'_> {
    /// A copy of a header map before a change, to put back if the change cannot be booked.
    fn snapshot(&self, rep: u32) -> Option<FieldMap> {
        self.http
            .table
            .get(&Resource::<FieldMap>::new_own(rep))
            .ok()
            .cloned()
    }

    fn booked_or_restored(&mut self, rep: u32, before: Option<FieldMap>) -> HeaderResult<()> {
        let booked = self.fields(rep);
        if booked.is_err()
            && let (Some(before), Ok(now)) = (
                before,
                self.http.table.get_mut(&Resource::<FieldMap>::new_own(rep)),
            )
        {
            *now = before;
        }
        header_result(booked)
    }
}

impl types::HostIncomingRequest for Charged<'_> {
    fn method(&mut self, id: Resource<HostIncomingRequest>) -> wasmtime::Result<types::Method> {
        types::HostIncomingRequest::method(&mut self.http, id)
    }

    fn path_with_query(
        &mut self,
        id: Resource<HostIncomingRequest>,
    ) -> wasmtime::Result<Option<String>> {
        types::HostIncomingRequest::path_with_query(&mut self.http, id)
    }

    fn scheme(
        &mut self,
        id: Resource<HostIncomingRequest>,
    ) -> wasmtime::Result<Option<types::Scheme>> {
        types::HostIncomingRequest::scheme(&mut self.http, id)
    }

    fn authority(&mut self, id: Resource<HostIncomingRequest>) -> wasmtime::Result<Option<String>> {
        types::HostIncomingRequest::authority(&mut self.http, id)
    }

    fn headers(
        &mut self,
        id: Resource<HostIncomingRequest>,
    ) -> wasmtime::Result<Resource<FieldMap>> {
        let made = types::HostIncomingRequest::headers(&mut self.http, id)?;
        self.made_fields(made)
    }

    fn consume(
        &mut self,
        id: Resource<HostIncomingRequest>,
    ) -> wasmtime::Result<Result<Resource<HostIncomingBody>, ()>> {
        types::HostIncomingRequest::consume(&mut self.http, id)
    }

    fn drop(&mut self, id: Resource<HostIncomingRequest>) -> wasmtime::Result<()> {
        self.ledger.release(id.rep());
        types::HostIncomingRequest::drop(&mut self.http, id)
    }
}

impl types::HostOutgoingRequest for Charged<'_> {
    fn new(
        &mut self,
        headers: Resource<FieldMap>,
    ) -> wasmtime::Result<Resource<HostOutgoingRequest>> {
        let from = headers.rep();
        let made = types::HostOutgoingRequest::new(&mut self.http, headers)
            .inspect_err(|_| self.ledger.release(from))?;
        self.ledger.transfer(from, made.rep());
        self.request(made.rep())?;
        Ok(made)
    }

    fn body(
        &mut self,
        request: Resource<HostOutgoingRequest>,
    ) -> wasmtime::Result<Result<Resource<HostOutgoingBody>, ()>> {
        let rep = request.rep();
        // The channel is booked before wasmtime-wasi-http makes it.
        let bytes = self.http.table.get(&request).map_or(ENTRY, request_bytes) + BODY_CHANNEL;
        self.ledger.set(rep, bytes)?;
        let made = types::HostOutgoingRequest::body(&mut self.http, request)?;
        self.request(rep)?;
        match made {
            Ok(body) => Ok(Ok(self.made(body, ENTRY)?)),
            Err(()) => Ok(Err(())),
        }
    }

    fn drop(&mut self, request: Resource<HostOutgoingRequest>) -> wasmtime::Result<()> {
        self.ledger.release(request.rep());
        types::HostOutgoingRequest::drop(&mut self.http, request)
    }

    fn method(
        &mut self,
        request: Resource<HostOutgoingRequest>,
    ) -> wasmtime::Result<types::Method> {
        types::HostOutgoingRequest::method(&mut self.http, request)
    }

    fn set_method(
        &mut self,
        request: Resource<HostOutgoingRequest>,
        method: types::Method,
    ) -> wasmtime::Result<Result<(), ()>> {
        let rep = request.rep();
        let set = self.http.set_method(request, method)?;
        self.request(rep)?;
        Ok(set)
    }

    fn path_with_query(
        &mut self,
        request: Resource<HostOutgoingRequest>,
    ) -> wasmtime::Result<Option<String>> {
        types::HostOutgoingRequest::path_with_query(&mut self.http, request)
    }

    fn set_path_with_query(
        &mut self,
        request: Resource<HostOutgoingRequest>,
        path_with_query: Option<String>,
    ) -> wasmtime::Result<Result<(), ()>> {
        self.booked_first(request, path_with_query, |http, request, value| {
            http.set_path_with_query(request, value)
        })
    }

    fn scheme(
        &mut self,
        request: Resource<HostOutgoingRequest>,
    ) -> wasmtime::Result<Option<types::Scheme>> {
        types::HostOutgoingRequest::scheme(&mut self.http, request)
    }

    fn set_scheme(
        &mut self,
        request: Resource<HostOutgoingRequest>,
        scheme: Option<types::Scheme>,
    ) -> wasmtime::Result<Result<(), ()>> {
        self.http.set_scheme(request, scheme)
    }

    fn authority(
        &mut self,
        request: Resource<HostOutgoingRequest>,
    ) -> wasmtime::Result<Option<String>> {
        types::HostOutgoingRequest::authority(&mut self.http, request)
    }

    fn set_authority(
        &mut self,
        request: Resource<HostOutgoingRequest>,
        authority: Option<String>,
    ) -> wasmtime::Result<Result<(), ()>> {
        self.booked_first(request, authority, |http, request, value| {
            http.set_authority(request, value)
        })
    }

    fn headers(
        &mut self,
        request: Resource<HostOutgoingRequest>,
    ) -> wasmtime::Result<Resource<FieldMap>> {
        let made = types::HostOutgoingRequest::headers(&mut self.http, request)?;
        self.made_fields(made)
    }
}

impl Charged<'_> {
    /// A request's path or authority: the request booked with the new text's length before
    /// wasmtime-wasi-http stores it, then booked as it is.
    fn booked_first(
        &mut self,
        request: Resource<HostOutgoingRequest>,
        value: Option<String>,
        store: impl FnOnce(
            &mut WasiHttpCtxView<'_>,
            Resource<HostOutgoingRequest>,
            Option<String>,
        ) -> wasmtime::Result<Result<(), ()>>,
    ) -> wasmtime::Result<Result<(), ()>> {
        let rep = request.rep();
        let now = self.http.table.get(&request).map_or(ENTRY, request_bytes);
        self.ledger
            .set(rep, now + value.as_ref().map_or(0, String::len))?;
        let stored = store(&mut self.http, request, value)?;
        self.request(rep)?;
        Ok(stored)
    }
}

impl types::HostResponseOutparam for Charged<'_> {
    fn drop(&mut self, id: Resource<HostResponseOutparam>) -> wasmtime::Result<()> {
        types::HostResponseOutparam::drop(&mut self.http, id)
    }

    fn set(
        &mut self,
        id: Resource<HostResponseOutparam>,
        resp: Result<Resource<HostOutgoingResponse>, types::ErrorCode>,
    ) -> wasmtime::Result<()> {
        if let Ok(response) = &resp {
            self.ledger.release(response.rep());
        }
        types::HostResponseOutparam::set(&mut self.http, id, resp)
    }

    fn send_informational(
        &mut self,
        id: Resource<HostResponseOutparam>,
        status: u16,
        headers: Resource<FieldMap>,
    ) -> HttpResult<()> {
        self.http.send_informational(id, status, headers)
    }
}

impl types::HostIncomingResponse for Charged<'_> {
    fn drop(&mut self, response: Resource<HostIncomingResponse>) -> wasmtime::Result<()> {
        self.ledger.release(response.rep());
        types::HostIncomingResponse::drop(&mut self.http, response)
    }

    fn status(
        &mut self,
        response: Resource<HostIncomingResponse>,
    ) -> wasmtime::Result<types::StatusCode> {
        self.http.status(response)
    }

    fn headers(
        &mut self,
        response: Resource<HostIncomingResponse>,
    ) -> wasmtime::Result<Resource<FieldMap>> {
        let made = types::HostIncomingResponse::headers(&mut self.http, response)?;
        self.made_fields(made)
    }

    fn consume(
        &mut self,
        response: Resource<HostIncomingResponse>,
    ) -> wasmtime::Result<Result<Resource<HostIncomingBody>, ()>> {
        match types::HostIncomingResponse::consume(&mut self.http, response)? {
            Ok(body) => Ok(Ok(self.made(body, ENTRY)?)),
            Err(()) => Ok(Err(())),
        }
    }
}

impl types::HostFutureTrailers for Charged<'_> {
    fn drop(&mut self, id: Resource<HostFutureTrailers>) -> wasmtime::Result<()> {
        self.ledger.release(id.rep());
        types::HostFutureTrailers::drop(&mut self.http, id)
    }

    fn subscribe(
        &mut self,
        index: Resource<HostFutureTrailers>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        types::HostFutureTrailers::subscribe(&mut self.http, index)
    }

    fn get(
        &mut self,
        id: Resource<HostFutureTrailers>,
    ) -> wasmtime::Result<
        Option<Result<Result<Option<Resource<types::Trailers>>, types::ErrorCode>, ()>>,
    > {
        let got = types::HostFutureTrailers::get(&mut self.http, id)?;
        if let Some(Ok(Ok(Some(trailers)))) = got {
            return Ok(Some(Ok(Ok(Some(self.made_fields(trailers)?)))));
        }
        Ok(got)
    }
}

impl types::HostIncomingBody for Charged<'_> {
    fn stream(
        &mut self,
        id: Resource<HostIncomingBody>,
    ) -> wasmtime::Result<Result<Resource<DynInputStream>, ()>> {
        self.http.stream(id)
    }

    fn finish(
        &mut self,
        id: Resource<HostIncomingBody>,
    ) -> wasmtime::Result<Resource<HostFutureTrailers>> {
        self.ledger.release(id.rep());
        let made = types::HostIncomingBody::finish(&mut self.http, id)?;
        self.made(made, ENTRY)
    }

    fn drop(&mut self, id: Resource<HostIncomingBody>) -> wasmtime::Result<()> {
        self.ledger.release(id.rep());
        types::HostIncomingBody::drop(&mut self.http, id)
    }
}

impl types::HostOutgoingResponse for Charged<'_> {
    fn new(
        &mut self,
        headers: Resource<FieldMap>,
    ) -> wasmtime::Result<Resource<HostOutgoingResponse>> {
        let from = headers.rep();
        let made = types::HostOutgoingResponse::new(&mut self.http, headers)
            .inspect_err(|_| self.ledger.release(from))?;
        self.ledger.transfer(from, made.rep());
        self.response(made.rep())?;
        Ok(made)
    }

    fn body(
        &mut self,
        id: Resource<HostOutgoingResponse>,
    ) -> wasmtime::Result<Result<Resource<HostOutgoingBody>, ()>> {
        let rep = id.rep();
        let bytes = self.http.table.get(&id).map_or(ENTRY, response_bytes) + BODY_CHANNEL;
        self.ledger.set(rep, bytes)?;
        let made = types::HostOutgoingResponse::body(&mut self.http, id)?;
        self.response(rep)?;
        match made {
            Ok(body) => Ok(Ok(self.made(body, ENTRY)?)),
            Err(()) => Ok(Err(())),
        }
    }

    fn status_code(
        &mut self,
        id: Resource<HostOutgoingResponse>,
    ) -> wasmtime::Result<types::StatusCode> {
        self.http.status_code(id)
    }

    fn set_status_code(
        &mut self,
        id: Resource<HostOutgoingResponse>,
        status: types::StatusCode,
    ) -> wasmtime::Result<Result<(), ()>> {
        self.http.set_status_code(id, status)
    }

    fn headers(
        &mut self,
        id: Resource<HostOutgoingResponse>,
    ) -> wasmtime::Result<Resource<FieldMap>> {
        let made = types::HostOutgoingResponse::headers(&mut self.http, id)?;
        self.made_fields(made)
    }

    fn drop(&mut self, id: Resource<HostOutgoingResponse>) -> wasmtime::Result<()> {
        self.ledger.release(id.rep());
        types::HostOutgoingResponse::drop(&mut self.http, id)
    }
}

impl types::HostFutureIncomingResponse for Charged<'_> {
    fn drop(&mut self, id: Resource<HostFutureIncomingResponse>) -> wasmtime::Result<()> {
        self.ledger.release(id.rep());
        types::HostFutureIncomingResponse::drop(&mut self.http, id)
    }

    fn get(
        &mut self,
        id: Resource<HostFutureIncomingResponse>,
    ) -> wasmtime::Result<
        Option<Result<Result<Resource<HostIncomingResponse>, types::ErrorCode>, ()>>,
    > {
        let got = types::HostFutureIncomingResponse::get(&mut self.http, id)?;
        if let Some(Ok(Ok(response))) = got {
            let bytes = self
                .http
                .table
                .get(&response)
                .map_or(ENTRY, |r| map_bytes(&r.headers));
            return Ok(Some(Ok(Ok(self.made(response, bytes)?))));
        }
        Ok(got)
    }

    fn subscribe(
        &mut self,
        id: Resource<HostFutureIncomingResponse>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        types::HostFutureIncomingResponse::subscribe(&mut self.http, id)
    }
}

impl types::HostOutgoingBody for Charged<'_> {
    fn write(
        &mut self,
        id: Resource<HostOutgoingBody>,
    ) -> wasmtime::Result<Result<Resource<DynOutputStream>, ()>> {
        self.http.write(id)
    }

    fn finish(
        &mut self,
        id: Resource<HostOutgoingBody>,
        ts: Option<Resource<types::Trailers>>,
    ) -> HttpResult<()> {
        self.ledger.release(id.rep());
        if let Some(trailers) = &ts {
            self.ledger.release(trailers.rep());
        }
        types::HostOutgoingBody::finish(&mut self.http, id, ts)
    }

    fn drop(&mut self, id: Resource<HostOutgoingBody>) -> wasmtime::Result<()> {
        self.ledger.release(id.rep());
        types::HostOutgoingBody::drop(&mut self.http, id)
    }
}

impl types::HostRequestOptions for Charged<'_> {
    fn new(&mut self) -> wasmtime::Result<Resource<types::RequestOptions>> {
        let made = types::HostRequestOptions::new(&mut self.http)?;
        self.made(made, ENTRY)
    }

    fn connect_timeout(
        &mut self,
        opts: Resource<types::RequestOptions>,
    ) -> wasmtime::Result<Option<types::Duration>> {
        self.http.connect_timeout(opts)
    }

    fn set_connect_timeout(
        &mut self,
        opts: Resource<types::RequestOptions>,
        duration: Option<types::Duration>,
    ) -> wasmtime::Result<Result<(), ()>> {
        self.http.set_connect_timeout(opts, duration)
    }

    fn first_byte_timeout(
        &mut self,
        opts: Resource<types::RequestOptions>,
    ) -> wasmtime::Result<Option<types::Duration>> {
        self.http.first_byte_timeout(opts)
    }

    fn set_first_byte_timeout(
        &mut self,
        opts: Resource<types::RequestOptions>,
        duration: Option<types::Duration>,
    ) -> wasmtime::Result<Result<(), ()>> {
        self.http.set_first_byte_timeout(opts, duration)
    }

    fn between_bytes_timeout(
        &mut self,
        opts: Resource<types::RequestOptions>,
    ) -> wasmtime::Result<Option<types::Duration>> {
        self.http.between_bytes_timeout(opts)
    }

    fn set_between_bytes_timeout(
        &mut self,
        opts: Resource<types::RequestOptions>,
        duration: Option<types::Duration>,
    ) -> wasmtime::Result<Result<(), ()>> {
        self.http.set_between_bytes_timeout(opts, duration)
    }

    fn drop(&mut self, rep: Resource<types::RequestOptions>) -> wasmtime::Result<()> {
        self.ledger.release(rep.rep());
        types::HostRequestOptions::drop(&mut self.http, rep)
    }
}

impl outgoing_handler::Host for Charged<'_> {
    /// The request's charge moves to the future of its response: the exchange holds the
    /// request (and its body's channel) until it ends.
    fn handle(
        &mut self,
        request: Resource<HostOutgoingRequest>,
        options: Option<Resource<types::RequestOptions>>,
    ) -> HttpResult<Resource<HostFutureIncomingResponse>> {
        let from = request.rep();
        // wasmtime-wasi-http takes the request out of the table before it may refuse it.
        let made = self
            .http
            .handle(request, options)
            .inspect_err(|_| self.ledger.release(from))?;
        self.ledger.transfer(from, made.rep());
        Ok(made)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(pool_kib: usize, rules: bool) -> (Ledger, Arc<Semaphore>) {
        let pool = Arc::new(Semaphore::new(pool_kib));
        (Ledger::new("g", pool.clone(), pool_kib, rules), pool)
    }

    #[test]
    fn a_charge_holds_the_guests_http_memory_until_it_is_released() {
        let (mut ledger, pool) = ledger(100, true);
        ledger.set(1, 40 << 10).unwrap();
        ledger.set(2, 50 << 10).unwrap();
        assert_eq!(pool.available_permits(), 10);
        let err = ledger.set(3, 20 << 10).unwrap_err().to_string();
        assert!(err.contains("its HTTP memory (100 KiB"), "{err}");
        assert!(err.contains("would hold 110 KiB"), "{err}");
        // A charge that shrinks gives back the difference; a release gives back the rest.
        ledger.set(1, 10 << 10).unwrap();
        assert_eq!(pool.available_permits(), 40);
        ledger.transfer(2, 7);
        ledger.release(2);
        assert_eq!(pool.available_permits(), 40, "moved, not released");
        ledger.release(7);
        ledger.release(1);
        assert_eq!(pool.available_permits(), 100);
        assert_eq!(ledger.held(), 0);
    }

    #[test]
    fn a_header_map_is_booked_at_the_most_it_held() {
        let (mut ledger, pool) = ledger(100, true);
        ledger.grow(1, 40 << 10).unwrap();
        ledger.grow(1, 1 << 10).unwrap();
        assert_eq!(
            pool.available_permits(),
            60,
            "an emptied map keeps its allocation"
        );
        ledger.grow(1, 50 << 10).unwrap();
        assert_eq!(pool.available_permits(), 50);
        let mut map = HeaderMap::new();
        for i in 0..100 {
            map.insert(
                http::HeaderName::try_from(format!("x-{i}")).unwrap(),
                http::HeaderValue::from_static(""),
            );
        }
        map.clear();
        assert!(map_bytes(&map) >= 100 * SLOT, "its slots are still counted");
    }

    #[test]
    fn an_instance_without_rules_holds_at_most_a_constant() {
        let (mut ledger, pool) = ledger(1 << 20, false);
        for rep in 0..16 {
            ledger.set(rep, 4 << 10).unwrap();
        }
        let err = ledger.set(99, 1).unwrap_err().to_string();
        assert!(err.contains("no http: rule"), "{err}");
        assert_eq!(ledger.held(), WITHOUT_RULES);
        assert_eq!(pool.available_permits(), (1 << 20) - 64);
    }
}
