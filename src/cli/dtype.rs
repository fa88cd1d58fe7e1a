//! `tilus dtype <name> [--json]`.

pub fn run(name: &str, json: bool) -> Result<String, String> {
    let _ = (name, json);
    Err("not implemented yet".into())
}
