//! `tokenscale-engine quantize`'s work: a GGUF model in, the same model in another mix out
//! (llama.cpp's per-tensor types, see `mix`), every tensor dequantised and quantised again
//! one at a time and streamed to a temporary file that is renamed into place when whole.

use std::fs;
use std::io::BufWriter;
use std::path::Path;

use crate::gguf::{GgmlType, GgufFile, TensorHeader, TensorInfo, Value, write_gguf};
use crate::quant::mix::{FileType, ModelShape, TensorShape, choose_types, llama_order};
use crate::quant::{dequantize, quantize};
use crate::{Error, Result};

/// What was written: each tensor's name, its type in and its type out.
#[derive(Debug, Clone)]
pub struct Report {
    pub tensors: Vec<(String, GgmlType, GgmlType)>,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// The architecture facts the mixes depend on, read from the file's metadata.
fn model_shape(file: &GgufFile) -> Result<ModelShape> {
    let arch = file.get_str("general.architecture")?.to_string();
    let n_layer = file.get_u32(&format!("{arch}.block_count"))? as usize;
    let heads = file
        .get_u32(&format!("{arch}.attention.head_count"))
        .unwrap_or(1);
    let kv_heads = file
        .get_u32(&format!("{arch}.attention.head_count_kv"))
        .unwrap_or(heads)
        .max(1);
    let n_expert = file.get_u32(&format!("{arch}.expert_count")).unwrap_or(0) as usize;
    Ok(ModelShape {
        arch,
        n_layer,
        n_gqa: (heads / kv_heads) as usize,
        n_expert,
    })
}

/// Requantises the GGUF model at `input` to `ftype`, writing `output`.
pub fn requantize_file(input: &Path, output: &Path, ftype: FileType) -> Result<Report> {
    let file = GgufFile::open(input)?;
    let shape = model_shape(&file)?;
    // llama.cpp's order (the mixes count tensors in it; the files then match byte for byte).
    let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    let infos: Vec<&TensorInfo> = llama_order(&names)
        .into_iter()
        .map(|i| &file.tensors()[i])
        .collect();
    let shapes: Vec<TensorShape<'_>> = infos
        .iter()
        .map(|t| TensorShape {
            name: &t.name,
            dims: &t.dims,
            ty: t.ggml_type,
        })
        .collect();
    let types = choose_types(ftype, &shape, &shapes);
    let headers: Vec<TensorHeader> = infos
        .iter()
        .zip(&types)
        .map(|(t, &ty)| TensorHeader {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty,
        })
        .collect();

    let mut metadata: Vec<(String, Value)> = file
        .metadata()
        .filter(|(k, _)| *k != "general.file_type" && *k != "general.quantization_version")
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    metadata.push(("general.quantization_version".into(), Value::U32(2)));
    metadata.push(("general.file_type".into(), Value::U32(ftype.id())));

    let partial = output.with_extension("gguf.part");
    let io_error = |what: &str| {
        let what = format!("{what} {}", partial.display());
        move |source| Error::Io { what, source }
    };
    let mut out = BufWriter::new(fs::File::create(&partial).map_err(io_error("creating"))?);
    let written = write_gguf(&mut out, &metadata, &headers, file.alignment(), |i| {
        tensor_bytes(&file, &infos[i].name, headers[i].ty).map_err(Failure::Engine)
    })
    .map_err(|f| match f {
        Failure::Io(source) => io_error("writing")(source),
        Failure::Engine(e) => e,
    })
    .and_then(|()| {
        drop(out);
        fs::rename(&partial, output).map_err(io_error("renaming"))
    });
    if let Err(e) = written {
        let _ = fs::remove_file(&partial); // a half-written file must not look like a model
        return Err(e);
    }
    let bytes_out = fs::metadata(output).map_err(io_error("reading"))?.len();
    Ok(Report {
        tensors: infos
            .iter()
            .zip(&types)
            .map(|(t, &ty)| (t.name.clone(), t.ggml_type, ty))
            .collect(),
        bytes_in: fs::metadata(input).map_err(io_error("reading"))?.len(),
        bytes_out,
    })
}

/// Why writing stopped: the file system, or a tensor that could not be converted.
enum Failure {
    Io(std::io::Error),
    Engine(Error),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Tensor `name` as `ty`'s bytes: copied when the type is unchanged, else dequantised and
/// quantised again.
fn tensor_bytes(file: &GgufFile, name: &str, ty: GgmlType) -> Result<Vec<u8>> {
    let info = file
        .tensor(name)
        .ok_or_else(|| Error::Model(format!("tensor {name} is missing")))?;
    let bytes = file.tensor_data(name)?;
    if info.ggml_type == ty {
        return Ok(bytes.to_vec());
    }
    let tensor_error = |source| Error::Tensor {
        tensor: name.to_string(),
        source,
    };
    let mut values = vec![0f32; info.num_elements() as usize];
    dequantize(info.ggml_type, bytes, &mut values).map_err(tensor_error)?;
    quantize(ty, &values).map_err(tensor_error)
}
