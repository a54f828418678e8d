//! The request path: protobuf bytes decoded as a `DispatchBatchRequest`, then converted under
//! the default rules: never panics, and a converted batch has one call per request element.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use toolgate::config::Config;
use toolgate::grpc::convert::{RequestRules, batch_from_request};
use toolgate::pb::DispatchBatchRequest;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = DispatchBatchRequest::decode(data) else {
        return;
    };
    let config = Config::default();
    let rules = RequestRules {
        limits: config.limits,
        dispatch: config.dispatch,
    };
    let elements = request.calls.len();
    if let Ok(batch) = batch_from_request(request, &rules) {
        assert_eq!(batch.calls.len(), elements);
    }
});
