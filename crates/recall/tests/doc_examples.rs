//! Every public item of the facade carries an example that runs as a doc test. rustdoc's own lint for this
//! (`missing_doc_code_examples`) is nightly-only, so this test reads the sources: each `pub` fn, struct,
//! enum, trait, const or re-export outside a private module must have a fenced code block in its doc
//! comment. (Fields and variants need docs, which `#![deny(missing_docs)]` enforces, not examples.)

use std::path::Path;

/// (file, line, item) of every public item without an example in its doc comment.
fn items_without_examples(file: &Path) -> Vec<String> {
    let src = std::fs::read_to_string(file).expect("the sources are readable");
    let lines: Vec<&str> = src.lines().collect();
    let mut missing = Vec::new();
    let mut depth_private: Option<usize> = None; // brace depth where a private or test module began
    let mut depth = 0usize;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if depth_private.is_none()
            && (t.starts_with("mod ") || t.starts_with("#[cfg(test)]"))
            && t.ends_with('{')
        {
            depth_private = Some(depth);
        }
        let opens = line.matches('{').count();
        let closes = line.matches('}').count();
        let is_item = [
            "pub fn ",
            "pub struct ",
            "pub enum ",
            "pub trait ",
            "pub const ",
            "pub use ",
            "pub mod ",
        ]
        .iter()
        .any(|p| t.starts_with(p));
        // Trait items and impl-block methods are indented; module-level items are not. Public methods of
        // public types (indent 4, inside `impl`) are public API too.
        if is_item && depth_private.is_none() && indent <= 4 && !t.starts_with("pub use sealed") {
            let mut j = i;
            let mut has_example = false;
            while j > 0 {
                let prev = lines[j - 1].trim_start();
                if prev.starts_with("///") {
                    if prev.starts_with("/// ```") {
                        has_example = true;
                    }
                } else if prev.starts_with("#[doc(hidden)]") {
                    has_example = true; // not public API
                } else if !(prev.starts_with("#[") || prev.starts_with("#![")) {
                    break;
                }
                j -= 1;
            }
            // `pub use` lines inside `diagnostics` re-export test helpers: the module's example covers them.
            let in_diagnostics = indent == 4 && t.starts_with("pub use ");
            // This crate's own items re-exported, and file modules (documented by their `//!` header,
            // which this test reads below).
            let local = t.starts_with("pub use engine::")
                || t.starts_with("pub use error::")
                || (t.starts_with("pub mod ") && t.ends_with(';'));
            if !has_example && !in_diagnostics && !local {
                missing.push(format!("{}:{}: {}", file.display(), i + 1, t));
            }
        }
        depth = depth + opens - closes.min(depth + opens);
        if let Some(d) = depth_private
            && depth <= d
            && closes > 0
        {
            depth_private = None;
        }
    }
    missing
}

#[test]
fn every_public_item_has_an_example() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut missing = Vec::new();
    for f in ["lib.rs", "engine.rs", "error.rs", "io.rs"] {
        missing.extend(items_without_examples(&src.join(f)));
    }
    for module in ["lib.rs", "io.rs"] {
        let text = std::fs::read_to_string(src.join(module)).unwrap();
        if !text.lines().any(|l| l.starts_with("//! ```")) {
            missing.push(format!("{module}: the module header has no example"));
        }
    }
    assert!(
        missing.is_empty(),
        "public items without a doc example:\n{}",
        missing.join("\n")
    );
}
