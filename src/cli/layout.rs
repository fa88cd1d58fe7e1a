//! `tilus layout '<expr>' [--json]`.

pub fn run(expr: &str, json: bool) -> Result<String, String> {
    let _ = (expr, json);
    Err("not implemented yet".into())
}
