//! The KServe v2 / Open Inference Protocol's tensors: JSON requests and responses, and the
//! binary-tensor extension (a JSON header of `Inference-Header-Content-Length` bytes followed
//! by raw little-endian tensor data). Decoding checks every input against the model and says
//! what was expected.

use half::{bf16, f16};
use kiln_ir::{DType, HostTensor, Storage};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::error::{ServeError, ServeResult};
use crate::model::{ModelDef, TensorSpec};

/// The protocol's name for a dtype (`FP32`, `INT64`, `BOOL`...).
pub fn datatype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "FP32",
        DType::F16 => "FP16",
        DType::BF16 => "BF16",
        DType::F64 => "FP64",
        DType::I64 => "INT64",
        DType::I32 => "INT32",
        DType::I16 => "INT16",
        DType::I8 => "INT8",
        DType::U8 => "UINT8",
        DType::U16 => "UINT16",
        DType::U32 => "UINT32",
        DType::U64 => "UINT64",
        DType::Bool => "BOOL",
    }
}

/// A spec as the metadata endpoint describes it.
pub fn spec_json(s: &TensorSpec) -> Value {
    json!({ "name": s.name, "datatype": datatype_name(s.dtype), "shape": s.shape })
}

/// One input tensor of a request.
#[derive(Debug, Deserialize)]
struct RequestInput {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Map<String, Value>,
    #[serde(default)]
    data: Option<Value>,
}

/// One requested output.
#[derive(Debug, Deserialize)]
struct RequestOutput {
    name: String,
    #[serde(default)]
    parameters: Map<String, Value>,
}

/// An inference request's JSON (header).
#[derive(Debug, Deserialize)]
struct InferRequest {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Map<String, Value>,
    inputs: Vec<RequestInput>,
    #[serde(default)]
    outputs: Option<Vec<RequestOutput>>,
}

/// A request checked against its model, ready for the batcher.
#[derive(Debug)]
pub struct Decoded {
    /// The request's `id`, echoed in the response.
    pub id: Option<String>,
    /// The inputs in the model's order.
    pub inputs: Vec<HostTensor>,
    /// Dim 0 of the inputs (1 for a model that is not batchable).
    pub rows: usize,
    /// Which outputs to return (index into the model's outputs) and whether as binary data.
    pub outputs: Vec<(usize, bool)>,
}

fn binary_flag(p: &Map<String, Value>, key: &str) -> bool {
    p.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn names(specs: &[TensorSpec]) -> String {
    specs.iter().map(|s| format!("'{}'", s.name)).collect::<Vec<_>>().join(", ")
}

/// Decodes and checks a request body. `header_len` is the `Inference-Header-Content-Length`
/// (binary extension); `max_batch` bounds dim 0 of a batchable model's inputs.
pub fn decode_request(def: &ModelDef, body: &[u8], header_len: Option<usize>, max_batch: usize) -> ServeResult<Decoded> {
    let (head, mut binary) = match header_len {
        Some(n) if n > body.len() => {
            return Err(ServeError::BadRequest(format!(
                "Inference-Header-Content-Length is {n} but the body has only {} bytes",
                body.len()
            )));
        }
        Some(n) => body.split_at(n),
        None => (body, &[][..]),
    };
    let req: InferRequest = serde_json::from_slice(head).map_err(|e| {
        ServeError::BadRequest(format!(
            "malformed inference request JSON: {e}; expected {{\"inputs\": [{{\"name\", \"shape\", \"datatype\", \"data\"}}]}}"
        ))
    })?;
    let mut slots: Vec<Option<HostTensor>> = vec![None; def.inputs.len()];
    for input in &req.inputs {
        let Some(idx) = def.inputs.iter().position(|s| s.name == input.name) else {
            return Err(ServeError::BadRequest(format!(
                "model '{}' has no input '{}'; its inputs are {}",
                def.name,
                input.name,
                names(&def.inputs)
            )));
        };
        if slots[idx].is_some() {
            return Err(ServeError::BadRequest(format!("input '{}' is given twice", input.name)));
        }
        slots[idx] = Some(decode_input(def, &def.inputs[idx], input, &mut binary, max_batch)?);
    }
    if !binary.is_empty() {
        return Err(ServeError::BadRequest(format!(
            "{} bytes of binary data follow the inputs' binary_data_size totals",
            binary.len()
        )));
    }
    let missing: Vec<&str> = def.inputs.iter().zip(&slots).filter(|(_, t)| t.is_none()).map(|(s, _)| s.name.as_str()).collect();
    if !missing.is_empty() {
        return Err(ServeError::BadRequest(format!(
            "missing input(s) {}; model '{}' takes {}",
            missing.join(", "),
            def.name,
            names(&def.inputs)
        )));
    }
    let inputs: Vec<HostTensor> = slots.into_iter().flatten().collect();
    let rows = if def.batchable { inputs.first().and_then(|t| t.shape().first().copied()).unwrap_or(1) } else { 1 };
    if def.batchable && let Some(t) = inputs.iter().find(|t| t.shape().first() != Some(&rows)) {
        return Err(ServeError::BadRequest(format!(
            "inputs disagree on the batch size (dim 0): {rows} and {} ({:?})",
            t.shape().first().copied().unwrap_or(0),
            t.shape()
        )));
    }
    let all_binary = binary_flag(&req.parameters, "binary_data_output");
    let outputs = match &req.outputs {
        None => (0..def.outputs.len()).map(|i| (i, all_binary)).collect(),
        Some(list) => list
            .iter()
            .map(|o| {
                let i = def.outputs.iter().position(|s| s.name == o.name).ok_or_else(|| {
                    ServeError::BadRequest(format!(
                        "model '{}' has no output '{}'; its outputs are {}",
                        def.name,
                        o.name,
                        names(&def.outputs)
                    ))
                })?;
                let binary = o.parameters.get("binary_data").and_then(Value::as_bool).unwrap_or(all_binary);
                Ok((i, binary))
            })
            .collect::<ServeResult<Vec<_>>>()?,
    };
    Ok(Decoded { id: req.id, inputs, rows, outputs })
}

/// Checks one input's datatype and shape against `spec` and reads its data (JSON, or the next
/// `binary_data_size` bytes of `binary`).
fn decode_input(def: &ModelDef, spec: &TensorSpec, input: &RequestInput, binary: &mut &[u8], max_batch: usize) -> ServeResult<HostTensor> {
    let expected_dt = datatype_name(spec.dtype);
    if input.datatype != expected_dt {
        return Err(ServeError::BadRequest(format!(
            "input '{}': expected datatype {expected_dt}, got {}",
            spec.name, input.datatype
        )));
    }
    let shape_ok = input.shape.len() == spec.shape.len()
        && input.shape.iter().zip(&spec.shape).all(|(&got, &want)| if want < 0 { got >= 1 } else { got == want });
    let batch_hint = if def.batchable { format!(" (-1: a batch of 1 to {max_batch})") } else { String::new() };
    if !shape_ok {
        return Err(ServeError::BadRequest(format!(
            "input '{}': expected shape {:?}{batch_hint}, got {:?}",
            spec.name, spec.shape, input.shape
        )));
    }
    if def.batchable && input.shape[0] as usize > max_batch {
        return Err(ServeError::BadRequest(format!(
            "input '{}': batch {} exceeds the server's --max-batch {max_batch}; split the request",
            spec.name, input.shape[0]
        )));
    }
    let shape: Vec<usize> = input.shape.iter().map(|&d| d as usize).collect();
    let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(|| {
        ServeError::BadRequest(format!("input '{}': shape {:?} is too large", spec.name, input.shape))
    })?;
    let storage = match input.parameters.get("binary_data_size") {
        Some(size) => {
            let size = size.as_u64().ok_or_else(|| {
                ServeError::BadRequest(format!("input '{}': binary_data_size must be a whole number of bytes", spec.name))
            })? as usize;
            if input.data.is_some() {
                return Err(ServeError::BadRequest(format!("input '{}' has both data and binary_data_size", spec.name)));
            }
            let want = numel.saturating_mul(spec.dtype.size_of());
            if size != want {
                return Err(ServeError::BadRequest(format!(
                    "input '{}': binary_data_size is {size} bytes; shape {:?} of {expected_dt} needs {want}",
                    spec.name, input.shape
                )));
            }
            if size > binary.len() {
                return Err(ServeError::BadRequest(format!(
                    "input '{}': binary_data_size is {size} bytes but only {} bytes of binary data are left",
                    spec.name,
                    binary.len()
                )));
            }
            let (mine, rest) = binary.split_at(size);
            *binary = rest;
            Storage::from_le_bytes(spec.dtype, mine).map_err(|e| ServeError::BadRequest(format!("input '{}': {e}", spec.name)))?
        }
        None => {
            let data = input.data.as_ref().ok_or_else(|| {
                ServeError::BadRequest(format!("input '{}' has no data (give \"data\" or a binary_data_size parameter)", spec.name))
            })?;
            let mut flat = Vec::with_capacity(numel);
            flatten(data, &mut flat);
            if flat.len() != numel {
                return Err(ServeError::BadRequest(format!(
                    "input '{}': shape {:?} needs {numel} elements, got {}",
                    spec.name,
                    input.shape,
                    flat.len()
                )));
            }
            json_storage(&spec.name, spec.dtype, &flat)?
        }
    };
    HostTensor::new(storage, &shape).map_err(|e| ServeError::BadRequest(format!("input '{}': {e}", spec.name)))
}

/// Collects the leaves of nested JSON arrays in row-major order.
fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        leaf => out.push(leaf),
    }
}

/// JSON elements as typed storage; an element of the wrong kind or out of range is refused
/// with its position.
fn json_storage(name: &str, dtype: DType, vals: &[&Value]) -> ServeResult<Storage> {
    fn each<T>(name: &str, what: &str, vals: &[&Value], f: impl Fn(&Value) -> Option<T>) -> ServeResult<Vec<T>> {
        vals.iter()
            .enumerate()
            .map(|(i, v)| f(v).ok_or_else(|| ServeError::BadRequest(format!("input '{name}' element {i}: expected {what}, got {v}"))))
            .collect()
    }
    fn int<T: TryFrom<i64> + TryFrom<u64>>(v: &Value) -> Option<T> {
        match v.as_i64() {
            Some(i) => T::try_from(i).ok(),
            None => T::try_from(v.as_u64()?).ok(),
        }
    }
    let f = |v: &Value| v.as_f64();
    Ok(match dtype {
        DType::F32 => Storage::F32(each(name, "a number", vals, |v| f(v).map(|x| x as f32))?),
        DType::F64 => Storage::F64(each(name, "a number", vals, f)?),
        DType::F16 => Storage::F16(each(name, "a number", vals, |v| f(v).map(f16::from_f64))?),
        DType::BF16 => Storage::BF16(each(name, "a number", vals, |v| f(v).map(bf16::from_f64))?),
        DType::I64 => Storage::I64(each(name, "an integer in INT64's range", vals, int)?),
        DType::I32 => Storage::I32(each(name, "an integer in INT32's range", vals, int)?),
        DType::I16 => Storage::I16(each(name, "an integer in INT16's range", vals, int)?),
        DType::I8 => Storage::I8(each(name, "an integer in INT8's range", vals, int)?),
        DType::U8 => Storage::U8(each(name, "an integer in UINT8's range", vals, int)?),
        DType::U16 => Storage::U16(each(name, "an integer in UINT16's range", vals, int)?),
        DType::U32 => Storage::U32(each(name, "an integer in UINT32's range", vals, int)?),
        DType::U64 => Storage::U64(each(name, "an integer in UINT64's range", vals, int)?),
        DType::Bool => Storage::Bool(each(name, "true or false", vals, Value::as_bool)?),
    })
}

/// The elements of a tensor as JSON values (exact for every dtype: 16-bit floats widen).
fn json_data(t: &HostTensor) -> Value {
    let t = t.contiguous();
    let v: Vec<Value> = match t.storage.as_ref() {
        Storage::I64(v) => v.iter().map(|&x| json!(x)).collect(),
        Storage::U64(v) => v.iter().map(|&x| json!(x)).collect(),
        Storage::Bool(v) => v.iter().map(|&x| json!(x)).collect(),
        s if s.dtype().is_float() => (0..s.len()).map(|i| json!(s.get_f64(i))).collect(),
        s => (0..s.len()).map(|i| json!(s.get_f64(i) as i64)).collect(),
    };
    Value::Array(v)
}

/// An encoded response: the body, and the JSON header's length when binary data follows it.
pub struct Encoded {
    /// The body bytes.
    pub body: Vec<u8>,
    /// `Some(len)` when the body is a JSON header of `len` bytes plus binary data.
    pub header_len: Option<usize>,
}

/// Encodes a response with the requested outputs (`results` are all the model's outputs).
pub fn encode_response(def: &ModelDef, id: Option<&str>, results: &[HostTensor], wanted: &[(usize, bool)]) -> ServeResult<Encoded> {
    let mut outputs = Vec::with_capacity(wanted.len());
    let mut binary = Vec::new();
    for &(i, as_binary) in wanted {
        let (spec, t) = match (def.outputs.get(i), results.get(i)) {
            (Some(s), Some(t)) => (s, t),
            _ => return Err(ServeError::Internal(format!("model '{}' returned {} outputs, expected {}", def.name, results.len(), def.outputs.len()))),
        };
        let mut o = json!({ "name": spec.name, "datatype": datatype_name(t.dtype()), "shape": t.shape() });
        if as_binary {
            let bytes = t.contiguous().storage.as_bytes().into_owned();
            o["parameters"] = json!({ "binary_data_size": bytes.len() });
            binary.extend_from_slice(&bytes);
        } else {
            o["data"] = json_data(t);
        }
        outputs.push(o);
    }
    let mut head = json!({ "model_name": def.name, "model_version": "1", "outputs": outputs });
    if let Some(id) = id {
        head["id"] = json!(id);
    }
    let mut body = serde_json::to_vec(&head).map_err(|e| ServeError::Internal(e.to_string()))?;
    let any_binary = wanted.iter().any(|w| w.1);
    let header_len = any_binary.then_some(body.len());
    body.extend_from_slice(&binary);
    Ok(Encoded { body, header_len })
}
