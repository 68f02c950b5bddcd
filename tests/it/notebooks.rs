//! The notebooks: stripped of outputs in git, and every one executes headlessly against
//! this build's binary (nbclient, through notebooks/run_notebooks.py).

use std::path::{Path, PathBuf};
use std::process::Command;

fn notebooks() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("notebooks");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ipynb"))
        .collect();
    v.sort();
    v
}

#[test]
fn there_are_at_least_three_notebooks_and_all_are_stripped() {
    let books = notebooks();
    assert!(books.len() >= 3, "{books:?}");
    for b in books {
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&b).unwrap()).unwrap();
        for (i, c) in doc["cells"].as_array().unwrap().iter().enumerate() {
            if c["cell_type"] == "code" {
                assert_eq!(
                    c["outputs"],
                    serde_json::json!([]),
                    "{} cell {i}",
                    b.display()
                );
                assert!(c["execution_count"].is_null(), "{} cell {i}", b.display());
            }
        }
    }
}

/// The Python that runs the notebooks: $FLASHOVERLAP_PYTHON (scripts/test sets it to the
/// pinned environment), else `python3`.
fn python() -> String {
    std::env::var("FLASHOVERLAP_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Needs the notebooks' Python environment with this repository's package installed,
/// which plain `cargo test` does not set up: it shows as ignored there, and
/// scripts/test, which makes the environment, runs it with `--ignored`.
#[test]
#[ignore = "needs the notebooks' Python environment and the package: scripts/test runs it"]
fn every_notebook_executes() {
    let py = python();
    let ready = Command::new(&py)
        .args([
            "-c",
            "import nbclient, ipykernel, nbformat, pandas, matplotlib, flashoverlap",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ready,
        "`{py}` lacks the notebooks' packages (notebooks/requirements.txt and this repository's `pip install .`); scripts/test installs them"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(&py)
        .arg(root.join("notebooks/run_notebooks.py"))
        .env("FLASHOVERLAP_BIN", env!("CARGO_BIN_EXE_flashoverlap"))
        .env("FLASHOVERLAP_ROOT", root)
        .env("FLASHOVERLAP_WORK", work.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for b in notebooks() {
        let name = b.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            text.contains(&format!("{name}: ok")),
            "{name} did not run:\n{text}"
        );
        // Each shows its pictures inline (run_notebooks.py fails a `# figure` cell
        // without one; every notebook has at least two).
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name}: ok")))
            .unwrap();
        let figures: u32 = line
            .split(", ")
            .nth(1)
            .and_then(|x| x.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(figures >= 2, "{line}");
    }
}
