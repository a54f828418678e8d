//! Real third-party peers against the real binary: grpcurl (the repository's demo script) and a
//! Python client with stubs generated from the repository's protos. `scripts/test` installs both
//! into `.testenv/`; set TOOLGATE_TESTENV to use another folder.
