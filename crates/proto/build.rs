//! Compiles the protos with the pure-Rust `protox` compiler (no system `protoc`) and generates
//! prost messages plus tonic stubs; also writes the descriptor set that reflection serves.
use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "../../proto/toolgate/v1/toolgate.proto",
        "../../proto/toolgate/v1/hooks.proto",
        "../../proto/toolgate/v1/worker.proto",
    ];
    println!("cargo:rerun-if-changed=../../proto");

    // include_imports keeps google/protobuf/*.proto in the set, which reflection clients need.
    let mut compiler = protox::Compiler::new(["../../proto"])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(protos)?;
    let fds = compiler.file_descriptor_set();

    // `file_descriptor_set_path` is ignored by compile_fds, so the bytes are written by hand.
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out_dir.join("toolgate_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Decode failures (oversized or too deeply nested messages) must reach clients as
        // INVALID_ARGUMENT, not INTERNAL, so the ToolGate service uses our codec wrapper.
        .codec_path("crate::codec::ToolgateCodec")
        // `Value` and `Struct` are read and written as JSON directly (`protojson`): the pipeline
        // speaks JSON, and a protobuf tree in between cost a conversion each way.
        .extern_path(".google.protobuf.Value", "crate::protojson::Value")
        .extern_path(".google.protobuf.Struct", "crate::protojson::Struct")
        .compile_fds(fds)?;
    Ok(())
}
