//! End-to-end tests of `kiln serve`: each starts a server in-process on 127.0.0.1:0 and talks
//! HTTP to it. The models are a tiny ONNX model built here (a linear layer with ReLU, and an
//! embedding lookup whose out-of-range ids make the kernel fail) and resnet18 (eager) where a
//! model must be slow.

use std::collections::HashMap;
use std::time::Duration;

use kiln_ir::{DType, Dim, HostTensor};
use kiln_onnx::builder::{graph, model, node, tensor_info};
use kiln_serve::{ModelDef, ServeConfig, Server};
use prost::Message;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The tiny model: `y = relu(x @ w + b)` (x: FP32 [batch, 4]) and `emb = table[ids]`
/// (ids: INT64 [batch, 2], table 5x3).
fn tiny_model() -> kiln_onnx::OnnxModel {
    let w = HostTensor::from_vec((0..12).map(|i| (i as f32 - 5.5) / 7.0).collect::<Vec<f32>>(), &[4, 3]).unwrap();
    let b = HostTensor::from_vec(vec![0.1f32, -0.2, 0.3], &[3]).unwrap();
    let table = HostTensor::from_vec((0..15).map(|i| i as f32 * 0.5).collect::<Vec<f32>>(), &[5, 3]).unwrap();
    let g = graph(
        vec![
            node("MatMul", &["x", "w"], &["xw"], vec![]),
            node("Add", &["xw", "b"], &["pre"], vec![]),
            node("Relu", &["pre"], &["y"], vec![]),
            node("Gather", &["table", "ids"], &["emb"], vec![]),
        ],
        vec![
            tensor_info("x", DType::F32, &[Dim::sym("batch"), Dim::Fixed(4)]),
            tensor_info("ids", DType::I64, &[Dim::sym("batch"), Dim::Fixed(2)]),
        ],
        vec![
            tensor_info("y", DType::F32, &[Dim::sym("batch"), Dim::Fixed(3)]),
            tensor_info("emb", DType::F32, &[Dim::sym("batch"), Dim::Fixed(2), Dim::Fixed(3)]),
        ],
        &[("w", w), ("b", b), ("table", table)],
    );
    model(g, 17)
}

/// The tiny model written to a temporary .onnx file and loaded from it, as the CLI does.
fn tiny_def() -> ModelDef {
    let dir = std::env::temp_dir().join(format!("kiln-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // One folder per call: tests run in parallel and must not read each other's half-written file.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = dir.join(CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny.onnx");
    std::fs::write(&path, tiny_model().proto.encode_to_vec()).unwrap();
    ModelDef::onnx_file(&path, &HashMap::new()).unwrap()
}

fn cfg() -> ServeConfig {
    ServeConfig { warmup_passes: 1, ..ServeConfig::default() }
}

async fn start(cfg: ServeConfig, defs: Vec<ModelDef>) -> (Server, String) {
    let server = Server::start(cfg, defs).await.unwrap();
    assert!(server.wait_ready(Duration::from_secs(60)).await, "models did not get ready");
    let base = format!("http://{}", server.addr());
    (server, base)
}

/// Row `i` of a request: x = [i, -i/2, 1, 0.25 i], ids = [i % 5, (i + 2) % 5].
fn row(i: usize) -> (Vec<f32>, Vec<i64>) {
    let f = i as f32;
    (vec![f, -f / 2.0, 1.0, 0.25 * f], vec![(i % 5) as i64, ((i + 2) % 5) as i64])
}

fn json_request(rows: &[usize]) -> Value {
    let (xs, ids): (Vec<Vec<f32>>, Vec<Vec<i64>>) = rows.iter().map(|&i| row(i)).unzip();
    let n = rows.len();
    json!({
        "id": "req-1",
        "inputs": [
            { "name": "x", "shape": [n, 4], "datatype": "FP32", "data": xs },
            { "name": "ids", "shape": [n, 2], "datatype": "INT64", "data": ids.concat() },
        ]
    })
}

/// What the reference interpreter gives for `rows` (run directly, outside the server).
fn reference(def: &ModelDef, rows: &[usize]) -> (Vec<f32>, Vec<f32>) {
    let (xs, ids): (Vec<Vec<f32>>, Vec<Vec<i64>>) = rows.iter().map(|&i| row(i)).unzip();
    let n = rows.len();
    let g = def.graph_for(n).unwrap();
    let out = kiln_cpu::run(
        &g,
        &[HostTensor::from_vec(xs.concat(), &[n, 4]).unwrap(), HostTensor::from_vec(ids.concat(), &[n, 2]).unwrap()],
    )
    .unwrap();
    (out[0].to_vec::<f32>().unwrap(), out[1].to_vec::<f32>().unwrap())
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

async fn post(c: &reqwest::Client, url: &str, body: &Value) -> (StatusCode, Value) {
    let r = c.post(url).body(body.to_string()).send().await.unwrap();
    let s = r.status();
    (s, serde_json::from_slice(&r.bytes().await.unwrap()).unwrap())
}

async fn get(c: &reqwest::Client, url: &str) -> (StatusCode, Value) {
    let r = c.get(url).send().await.unwrap();
    let s = r.status();
    (s, serde_json::from_slice(&r.bytes().await.unwrap()).unwrap())
}

async fn metrics(c: &reqwest::Client, base: &str) -> String {
    c.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap()
}

/// The value of the metric line starting with `prefix` (0 when absent).
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

#[tokio::test]
async fn every_endpoint_answers_as_the_protocol_says() {
    let (server, base) = start(cfg(), vec![tiny_def()]).await;
    let c = reqwest::Client::new();
    assert_eq!(get(&c, &format!("{base}/v2/health/live")).await, (StatusCode::OK, json!({ "live": true })));
    assert_eq!(get(&c, &format!("{base}/v2/health/ready")).await, (StatusCode::OK, json!({ "ready": true })));
    let (s, meta) = get(&c, &format!("{base}/v2")).await;
    assert_eq!((s, meta["name"].as_str()), (StatusCode::OK, Some("kiln")));
    let (s, meta) = get(&c, &format!("{base}/v2/models/tiny")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(meta["name"], "tiny");
    assert_eq!(
        meta["inputs"],
        json!([{ "name": "x", "datatype": "FP32", "shape": [-1, 4] }, { "name": "ids", "datatype": "INT64", "shape": [-1, 2] }])
    );
    assert_eq!(
        meta["outputs"],
        json!([{ "name": "y", "datatype": "FP32", "shape": [-1, 3] }, { "name": "emb", "datatype": "FP32", "shape": [-1, 2, 3] }])
    );
    assert_eq!(get(&c, &format!("{base}/v2/models/tiny/versions/1")).await.1, meta);
    assert_eq!(get(&c, &format!("{base}/v2/models/tiny/ready")).await, (StatusCode::OK, json!({ "name": "tiny", "ready": true })));

    // JSON inference against the reference interpreter, bit for bit.
    let (s, out) = post(&c, &format!("{base}/v2/models/tiny/infer"), &json_request(&[3, 4])).await;
    assert_eq!(s, StatusCode::OK, "{out}");
    assert_eq!((out["model_name"].as_str(), out["id"].as_str()), (Some("tiny"), Some("req-1")));
    let (y, emb) = reference(&tiny_def(), &[3, 4]);
    assert_eq!(out["outputs"][0]["name"], "y");
    assert_eq!(out["outputs"][0]["shape"], json!([2, 3]));
    assert_eq!(floats(&out["outputs"][0]["data"]), y);
    assert_eq!(out["outputs"][1]["shape"], json!([2, 2, 3]));
    assert_eq!(floats(&out["outputs"][1]["data"]), emb);
    // The versioned route and a requested subset of outputs.
    let mut req = json_request(&[3, 4]);
    req["outputs"] = json!([{ "name": "emb" }]);
    let (s, out) = post(&c, &format!("{base}/v2/models/tiny/versions/1/infer"), &req).await;
    assert_eq!((s, out["outputs"].as_array().map(Vec::len)), (StatusCode::OK, Some(1)));
    assert_eq!(floats(&out["outputs"][0]["data"]), emb);

    // Unknown routes and models: 404 with a JSON error.
    let (s, e) = get(&c, &format!("{base}/nope")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(e["error"].is_string());
    for url in ["/v2/models/nope", "/v2/models/nope/ready"] {
        let (s, e) = get(&c, &format!("{base}{url}")).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{url}");
        assert!(e["error"].as_str().unwrap().contains("this server has: tiny"), "{e}");
    }
    let (s, e) = post(&c, &format!("{base}/v2/models/nope/infer"), &json_request(&[1])).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(e["error"].as_str().unwrap().contains("unknown model 'nope'"), "{e}");

    // Metrics moved.
    let m = metrics(&c, &base).await;
    assert_eq!(metric(&m, r#"kiln_requests_total{model="tiny",status="200"}"#), 2.0, "{m}");
    assert_eq!(metric(&m, r#"kiln_requests_total{model="unknown",status="404"}"#), 1.0, "{m}");
    assert_eq!(metric(&m, r#"kiln_request_duration_seconds_count{model="tiny"}"#), 2.0, "{m}");
    assert_eq!(metric(&m, r#"kiln_model_ready{model="tiny"}"#), 1.0, "{m}");
    assert!(m.contains(r#"kiln_compile_seconds{model="tiny",batch="8"}"#), "{m}");
    assert!(m.contains(r#"kiln_warmup_seconds{model="tiny"}"#) && m.contains("kiln_queue_depth"), "{m}");
    assert!(metric(&m, "kiln_process_resident_memory_bytes") > 0.0, "{m}");
    assert!(m.lines().any(|l| l.starts_with("kiln_gpu_present ")), "{m}");
    server.shutdown().await.unwrap();
}

/// A binary-extension request: JSON header, then the raw tensors.
fn binary_request(rows: &[usize], binary_out: bool) -> (Vec<u8>, usize) {
    let (xs, ids): (Vec<Vec<f32>>, Vec<Vec<i64>>) = rows.iter().map(|&i| row(i)).unzip();
    let n = rows.len();
    let (xb, ib): (Vec<u8>, Vec<u8>) =
        (xs.concat().iter().flat_map(|v| v.to_le_bytes()).collect(), ids.concat().iter().flat_map(|v| v.to_le_bytes()).collect());
    let head = json!({
        "inputs": [
            { "name": "x", "shape": [n, 4], "datatype": "FP32", "parameters": { "binary_data_size": xb.len() } },
            { "name": "ids", "shape": [n, 2], "datatype": "INT64", "parameters": { "binary_data_size": ib.len() } },
        ],
        "outputs": [{ "name": "y", "parameters": { "binary_data": binary_out } }, { "name": "emb" }],
    })
    .to_string();
    let mut body = head.clone().into_bytes();
    body.extend(xb);
    body.extend(ib);
    (body, head.len())
}

#[tokio::test]
async fn binary_tensors_in_and_out() {
    let (server, base) = start(cfg(), vec![tiny_def()]).await;
    let c = reqwest::Client::new();
    let (y, emb) = reference(&tiny_def(), &[1, 2, 7]);
    let (body, head) = binary_request(&[1, 2, 7], true);
    let r = c.post(format!("{base}/v2/models/tiny/infer")).header("Inference-Header-Content-Length", head).body(body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let hlen: usize = r.headers()["inference-header-content-length"].to_str().unwrap().parse().unwrap();
    let bytes = r.bytes().await.unwrap();
    let header: Value = serde_json::from_slice(&bytes[..hlen]).unwrap();
    assert_eq!(header["outputs"][0]["parameters"]["binary_data_size"], 36);
    let got: Vec<f32> = bytes[hlen..].chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(got, y);
    assert_eq!(floats(&header["outputs"][1]["data"]), emb, "outputs not asked as binary stay JSON");

    // Binary sizes that do not fit the shape, or a header length past the body: 400.
    let (mut body, head) = binary_request(&[1], false);
    body.pop();
    let r = c.post(format!("{base}/v2/models/tiny/infer")).header("Inference-Header-Content-Length", head).body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let e: Value = r.json_body().await;
    assert!(e["error"].as_str().unwrap().contains("binary_data_size is 16 bytes but only 15"), "{e}");
    let r = c.post(format!("{base}/v2/models/tiny/infer")).header("Inference-Header-Content-Length", 100_000).body(body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    server.shutdown().await.unwrap();
}

/// Reads a JSON body.
trait JsonBody {
    async fn json_body(self) -> Value;
}

impl JsonBody for reqwest::Response {
    async fn json_body(self) -> Value {
        serde_json::from_slice(&self.bytes().await.unwrap()).unwrap()
    }
}

#[tokio::test]
async fn bad_inputs_are_400_with_what_was_expected() {
    let (server, base) = start(ServeConfig { max_batch: 4, ..cfg() }, vec![tiny_def()]).await;
    let c = reqwest::Client::new();
    let url = format!("{base}/v2/models/tiny/infer");
    let good = json_request(&[1]);
    let with = |path: &[&str], v: Value| {
        let mut r = good.clone();
        let mut at = &mut r;
        for p in path {
            at = match p.parse::<usize>() {
                Ok(i) => &mut at[i],
                Err(_) => &mut at[*p],
            };
        }
        *at = v;
        r
    };
    let cases: Vec<(Value, &str)> = vec![
        (with(&["inputs", "0", "datatype"], json!("INT32")), "input 'x': expected datatype FP32, got INT32"),
        (with(&["inputs", "0", "shape"], json!([1, 5])), "input 'x': expected shape [-1, 4]"),
        (with(&["inputs", "0", "shape"], json!([1, 2, 2])), "expected shape [-1, 4] (-1: a batch of 1 to 4), got [1, 2, 2]"),
        (with(&["inputs", "0", "data"], json!([1.0, 2.0, 3.0])), "input 'x': shape [1, 4] needs 4 elements, got 3"),
        (with(&["inputs", "0", "data"], json!([1.0, 2.0, "a", 4.0])), "input 'x' element 2: expected a number"),
        (with(&["inputs", "1", "data"], json!([1.5, 2])), "input 'ids' element 0: expected an integer"),
        (with(&["inputs", "0", "name"], json!("X")), "model 'tiny' has no input 'X'; its inputs are 'x', 'ids'"),
        (with(&["inputs"], json!([good["inputs"][0]])), "missing input(s) ids"),
        (with(&["inputs", "1", "shape"], json!([2, 2])), "needs 4 elements"),
        (with(&["outputs"], json!([{ "name": "z" }])), "model 'tiny' has no output 'z'; its outputs are 'y', 'emb'"),
        (with(&["inputs", "0", "shape"], json!([5, 4])), "batch 5 exceeds the server's --max-batch 4"),
        (with(&["inputs"], json!("nope")), "malformed inference request JSON"),
    ];
    for (req, want) in cases {
        let (s, e) = post(&c, &url, &req).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{req} -> {e}");
        assert!(e["error"].as_str().unwrap().contains(want), "{req}: got {e}, want '{want}'");
    }
    // Inputs that disagree on the batch size.
    let mut two = json_request(&[1, 2]);
    two["inputs"][1] = json_request(&[1])["inputs"][1].clone();
    let (s, e) = post(&c, &url, &two).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(e["error"].as_str().unwrap().contains("disagree on the batch size"), "{e}");
    // Not JSON at all.
    let r = c.post(&url).body("{\"inputs\": [").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.json_body().await["error"].as_str().unwrap().starts_with("malformed inference request JSON"));

    // A kernel failure (an id out of the table's range) fails that request alone, with 503.
    let bad_id = with(&["inputs", "1", "data"], json!([0, 7]));
    let (s, e) = post(&c, &url, &bad_id).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{e}");
    assert!(e["error"].as_str().unwrap().contains("running the model failed"), "{e}");
    // ... also inside a batch with good requests, which still succeed.
    let (y, _) = reference(&tiny_def(), &[1]);
    let reqs = (0..4).map(|i| {
        let (c, url) = (c.clone(), url.clone());
        let body = if i == 2 { bad_id.clone() } else { good.clone() };
        tokio::spawn(async move { post(&c, &url, &body).await })
    });
    for (i, h) in reqs.collect::<Vec<_>>().into_iter().enumerate() {
        let (s, out) = h.await.unwrap();
        if i == 2 {
            assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
        } else {
            assert_eq!(s, StatusCode::OK, "{out}");
            assert_eq!(floats(&out["outputs"][0]["data"]), y);
        }
    }
    assert_eq!(post(&c, &url, &good).await.0, StatusCode::OK, "the server keeps serving");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn api_keys_rate_limit_and_body_limit() {
    let keys_cfg = ServeConfig {
        api_keys: vec!["alpha-key".into(), "beta-key".into()],
        rate_limit: Some(2.0),
        max_body_bytes: 2048,
        ..cfg()
    };
    let (server, base) = start(keys_cfg, vec![tiny_def()]).await;
    let c = reqwest::Client::new();
    let url = format!("{base}/v2/models/tiny/infer");
    let body = json_request(&[1]).to_string();
    // Health probes are open; everything else needs a key.
    assert_eq!(c.get(format!("{base}/v2/health/live")).send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(c.get(format!("{base}/v2/health/ready")).send().await.unwrap().status(), StatusCode::OK);
    let r = c.post(&url).body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert!(r.json_body().await["error"].as_str().unwrap().contains("missing API key"));
    let r = c.post(&url).bearer_auth("wrong-key").body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(!r.json_body().await.to_string().contains("wrong-key"), "keys are never echoed");
    assert_eq!(c.get(format!("{base}/metrics")).send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(c.get(format!("{base}/v2/models/tiny")).send().await.unwrap().status(), StatusCode::UNAUTHORIZED);

    // 2 requests/s per key, bursts of 2: the third at once is 429 with Retry-After.
    for _ in 0..2 {
        let r = c.post(&url).bearer_auth("alpha-key").body(body.clone()).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = c.post(&url).bearer_auth("alpha-key").body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1);
    assert!(r.json_body().await["error"].as_str().unwrap().contains("rate limit"));
    // Another key has its own budget.
    let r = c.post(&url).bearer_auth("beta-key").body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // Bodies over the limit: 413 (declared length, and a chunked body without one).
    let big = format!("{{\"inputs\": [], \"pad\": \"{}\"}}", "x".repeat(4096));
    let r = c.post(&url).bearer_auth("beta-key").body(big.clone()).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(r.json_body().await["error"].as_str().unwrap().contains("limit of 2048 bytes"));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let status = chunked_post(server.addr(), "/v2/models/tiny/infer", "beta-key", big.as_bytes()).await;
    assert_eq!(status, 413, "a chunked body without Content-Length is cut at the limit too");
    server.shutdown().await.unwrap();
}

/// Posts `body` in 512-byte chunks without a Content-Length (raw HTTP/1.1); the status code.
async fn chunked_post(addr: std::net::SocketAddr, path: &str, key: &str, body: &[u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    for c in body.chunks(512) {
        // The server may answer and close before every chunk is sent.
        if s.write_all(format!("{:x}\r\n", c.len()).as_bytes()).await.is_err() || s.write_all(c).await.is_err() || s.write_all(b"\r\n").await.is_err() {
            break;
        }
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp).await;
    let text = String::from_utf8_lossy(&resp);
    text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn concurrent_requests_are_batched_and_match_sequential_ones() {
    let batching = ServeConfig { max_batch: 8, batch_timeout: Duration::from_millis(50), ..cfg() };
    let (server, base) = start(batching, vec![tiny_def()]).await;
    let c = reqwest::Client::new();
    let url = format!("{base}/v2/models/tiny/infer");
    // Sequential answers first (each runs alone: nothing else is waiting).
    let mut sequential = Vec::new();
    for i in 0..12 {
        let (s, out) = post(&c, &url, &json_request(&[i])).await;
        assert_eq!(s, StatusCode::OK);
        sequential.push(out["outputs"].clone());
    }
    let before = metrics(&c, &base).await;
    // Then all at once: single rows and a 2-row request, batched together.
    let handles: Vec<_> = (0..12)
        .map(|i| {
            let (c, url) = (c.clone(), url.clone());
            tokio::spawn(async move { post(&c, &url, &json_request(&[i])).await })
        })
        .collect();
    let pair = post(&c, &url, &json_request(&[5, 6])).await;
    for (i, h) in handles.into_iter().enumerate() {
        let (s, out) = h.await.unwrap();
        assert_eq!(s, StatusCode::OK);
        assert_eq!(out["outputs"], sequential[i], "request {i}: batched != sequential");
    }
    assert_eq!(pair.0, StatusCode::OK);
    let y: Vec<f32> = [5, 6].iter().flat_map(|&i| floats(&sequential[i][0]["data"])).collect();
    assert_eq!(floats(&pair.1["outputs"][0]["data"]), y);
    // Fewer runs than requests: some ran together.
    let after = metrics(&c, &base).await;
    let runs = metric(&after, r#"kiln_batch_size_count{model="tiny"}"#) - metric(&before, r#"kiln_batch_size_count{model="tiny"}"#);
    let rows = metric(&after, r#"kiln_batch_size_sum{model="tiny"}"#) - metric(&before, r#"kiln_batch_size_sum{model="tiny"}"#);
    assert_eq!(rows, 14.0, "{after}");
    assert!(runs < 13.0, "13 requests ran as {runs} batches");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn compiled_batch_sizes_share_one_size_generic_library_and_match_the_interpreter() {
    let compiled = ServeConfig { mode: kiln::compile::Mode::Default, max_batch: 8, ..cfg() };
    let (server, base) = start(compiled, vec![tiny_def()]).await;
    let c = reqwest::Client::new();
    let url = format!("{base}/v2/models/tiny/infer");
    // 1, 2, 3 and 6 rows run on the plans for batches 1, 2, 4 and 8.
    for rows in [vec![0], vec![1, 2], vec![3, 4, 5], vec![6, 7, 8, 9, 10, 11]] {
        let (s, out) = post(&c, &url, &json_request(&rows)).await;
        assert_eq!(s, StatusCode::OK, "{out}");
        let (y, emb) = reference(&tiny_def(), &rows);
        for (got, want) in [(floats(&out["outputs"][0]["data"]), y), (floats(&out["outputs"][1]["data"]), emb)] {
            assert_eq!(got.len(), want.len());
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{rows:?}: {a} vs {b}");
            }
        }
    }
    // Batches 2, 4 and 8 (at least; batch 1 may need code of its own) ran on one C library
    // that takes the batch size as an argument.
    let m = metrics(&c, &base).await;
    assert!(metric(&m, r#"kiln_size_generic_batches{model="tiny"}"#) >= 3.0, "{m}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn requests_time_out_and_shutdown_drains_in_flight_ones() {
    // The batcher holds a lone request for 400 ms: past a 100 ms timeout, it is answered 503.
    let slow = ServeConfig { max_batch: 8, batch_timeout: Duration::from_millis(400), request_timeout: Duration::from_millis(100), ..cfg() };
    let (server, base) = start(slow, vec![tiny_def()]).await;
    let c = reqwest::Client::new();
    let (s, e) = post(&c, &format!("{base}/v2/models/tiny/infer"), &json_request(&[1])).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert!(e["error"].as_str().unwrap().contains("not answered within"), "{e}");
    server.shutdown().await.unwrap();

    let held = ServeConfig { max_batch: 8, batch_timeout: Duration::from_millis(400), ..cfg() };
    let (server, base) = start(held, vec![tiny_def()]).await;
    let url = format!("{base}/v2/models/tiny/infer");
    let in_flight = {
        let (c, url) = (c.clone(), url.clone());
        tokio::spawn(async move { post(&c, &url, &json_request(&[3])).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    server.shutdown().await.unwrap();
    let (s, out) = in_flight.await.unwrap();
    assert_eq!(s, StatusCode::OK, "the in-flight request was answered: {out}");
    assert_eq!(floats(&out["outputs"][0]["data"]), reference(&tiny_def(), &[3]).0);
    assert!(started.elapsed() >= Duration::from_millis(200), "shutdown waited for it");
    assert!(reqwest::Client::new().get(format!("{base}/v2/health/live")).send().await.is_err(), "no longer listening");
}

#[tokio::test]
async fn warm_up_gates_readiness_and_a_full_queue_sheds_with_503() {
    // resnet18 eagerly: ~0.1 s a pass, so warm-up takes a while and requests pile up.
    let def = ModelDef::zoo("resnet18", &kiln::zoo::ModelConfig::default()).unwrap();
    let cfg = ServeConfig { max_batch: 1, queue_capacity: 2, warmup_passes: 4, ..ServeConfig::default() };
    let server = Server::start(cfg, vec![def]).await.unwrap();
    let base = format!("http://{}", server.addr());
    let c = reqwest::Client::new();
    let image = json!({ "inputs": [{ "name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32", "data": vec![0.5f32; 3 * 224 * 224] }] });
    let url = format!("{base}/v2/models/resnet18/infer");
    // Before warm-up ends: not ready, and inference says why.
    assert_eq!(get(&c, &format!("{base}/v2/health/ready")).await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(get(&c, &format!("{base}/v2/models/resnet18/ready")).await.0, StatusCode::SERVICE_UNAVAILABLE);
    let (s, e) = post(&c, &url, &image).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert!(e["error"].as_str().unwrap().contains("warming up"), "{e}");
    assert!(server.wait_ready(Duration::from_secs(60)).await);
    assert_eq!(get(&c, &format!("{base}/v2/health/ready")).await.0, StatusCode::OK);
    let m = metrics(&c, &base).await;
    assert!(metric(&m, r#"kiln_warmup_seconds{model="resnet18"}"#) > 0.0, "{m}");

    // 10 at once against one running + 2 queued: the rest are shed at once with 503.
    let handles: Vec<_> = (0..10)
        .map(|_| {
            let (c, url, image) = (c.clone(), url.clone(), image.clone());
            tokio::spawn(async move {
                let r = c.post(&url).body(image.to_string()).send().await.unwrap();
                (r.status(), r.headers().get("retry-after").is_some())
            })
        })
        .collect();
    let mut by_status: HashMap<u16, usize> = HashMap::new();
    for h in handles {
        let (s, retry_after) = h.await.unwrap();
        assert!(s == StatusCode::OK || (s == StatusCode::SERVICE_UNAVAILABLE && retry_after), "{s}");
        *by_status.entry(s.as_u16()).or_default() += 1;
    }
    assert!(by_status.get(&503).copied().unwrap_or(0) >= 1, "{by_status:?}");
    assert!(by_status.get(&200).copied().unwrap_or(0) >= 1, "{by_status:?}");
    assert_eq!(post(&c, &url, &image).await.0, StatusCode::OK, "still serving after overload");
    let m = metrics(&c, &base).await;
    assert_eq!(metric(&m, r#"kiln_queue_depth{model="resnet18"}"#), 0.0, "{m}");
    server.shutdown().await.unwrap();
}

/// `device: cuda:0`: without a GPU the start fails at once, naming what is missing; with one,
/// the tiny model is served from CUDA plans (fused, and eager = unfused) and answers as the
/// reference interpreter does.
#[tokio::test]
async fn cuda_serving_needs_a_gpu_and_matches_the_reference() {
    let cuda = ServeConfig { device: kiln::Device::Cuda(0), max_batch: 2, ..cfg() };
    if kiln::compile::check_device(cuda.device).is_err() {
        let e = match Server::start(cuda, vec![tiny_def()]).await {
            Ok(_) => panic!("served on cuda:0 without a usable GPU"),
            Err(e) => e.to_string(),
        };
        assert!(e.starts_with("--device cuda:0: ") && (e.contains("libcuda not found") || e.contains("CUDA device")), "{e}");
        eprintln!("no CUDA device: skipping CUDA serving");
        return;
    }
    let (y, emb) = reference(&tiny_def(), &[3, 4]);
    for mode in [kiln::compile::Mode::Default, kiln::compile::Mode::Eager] {
        let (server, base) = start(ServeConfig { mode, ..cuda.clone() }, vec![tiny_def()]).await;
        let (s, out) = post(&reqwest::Client::new(), &format!("{base}/v2/models/tiny/infer"), &json_request(&[3, 4])).await;
        assert_eq!(s, StatusCode::OK, "{mode:?}: {out}");
        let close = |got: Vec<f32>, want: &[f32]| got.len() == want.len() && got.iter().zip(want).all(|(a, b)| (a - b).abs() <= 1e-5 * (1.0 + b.abs()));
        assert!(close(floats(&out["outputs"][0]["data"]), &y), "{mode:?}: {out} vs {y:?}");
        assert!(close(floats(&out["outputs"][1]["data"]), &emb), "{mode:?}: {out} vs {emb:?}");
        server.shutdown().await.unwrap();
    }
}
