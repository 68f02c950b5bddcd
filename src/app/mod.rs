//! The use cases the front ends share: typed requests, results and errors, with no
//! command-line types in them. The command line (`cli`) and the Python package
//! (`python/`) are adapters: they turn flags or arguments into a request and present the
//! result. Presentation that is a file format of the use case (the collective's
//! nccl-tests table, `run`'s `run.json`) lives here too, so every front end writes the
//! same bytes.

pub mod calibrate;
pub mod collective;
pub mod plot;
pub mod run;
pub mod search;
pub mod simulate;
pub mod sweep;
pub mod validate;

type Boxed = Box<dyn std::error::Error + Send + Sync>;

/// Why a use case failed, by whose fault: bad input (a request, a file it reads), an
/// output that could not be written, or a run that failed (a simulation, the GPU). The
/// front ends map the three to their own signals (the command line's exit codes 2, 3
/// and 1); the typed cause is inside, with its chain.
#[derive(Debug)]
pub enum Error {
    Input(Boxed),
    Output(Boxed),
    Run(Boxed),
}

impl Error {
    pub fn input(e: impl Into<Boxed>) -> Error {
        Error::Input(e.into())
    }
    pub fn output(e: impl Into<Boxed>) -> Error {
        Error::Output(e.into())
    }
    pub fn run(e: impl Into<Boxed>) -> Error {
        Error::Run(e.into())
    }
    /// The cause, whatever its kind.
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        match self {
            Error::Input(e) | Error::Output(e) | Error::Run(e) => e.as_ref(),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self.inner(), f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner().source()
    }
}

/// A file a use case reads that is not what it should be: the path and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FileError {
    pub path: String,
    pub message: String,
}

impl FileError {
    pub fn new(path: &std::path::Path, message: impl std::fmt::Display) -> FileError {
        FileError {
            path: path.display().to_string(),
            message: message.to_string(),
        }
    }
}

/// An input that could not be read at all (missing, not a regular file, too large).
/// The front ends may tell it from a file that was read and is wrong (Python raises
/// `OSError` for it, `ValueError` for the other).
#[derive(Debug, thiserror::Error)]
#[error("cannot read {path}: {message}")]
pub struct ReadError {
    pub path: String,
    /// The I/O error's text (its kind is in `kind`).
    pub message: String,
    pub kind: std::io::ErrorKind,
}

/// Read `path` as text of at most `limit` bytes.
pub fn read_text(path: &std::path::Path, limit: u64) -> Result<String, Error> {
    crate::io::read_text(path, limit).map_err(|e| {
        Error::input(ReadError {
            path: path.display().to_string(),
            message: e.to_string(),
            kind: e.kind(),
        })
    })
}

/// The shard outputs `inputs` name, each a folder holding `file` or the file itself,
/// parsed by `parse(shown name, text)`: what `sweep merge` and `search merge` join.
pub(crate) fn read_shards<T, E>(
    inputs: &[std::path::PathBuf],
    file: &str,
    parse: impl Fn(&str, &str) -> Result<T, E>,
) -> Result<Vec<(String, T)>, Error>
where
    E: Into<Boxed>,
{
    let mut out = Vec::with_capacity(inputs.len());
    for p in inputs {
        let path = if p.is_dir() { p.join(file) } else { p.clone() };
        let shown = path.display().to_string();
        let text = read_text(&path, crate::io::MAX_DATA_BYTES)?;
        let parsed = parse(&shown, &text).map_err(Error::input)?;
        out.push((shown, parsed));
    }
    Ok(out)
}

/// Create the folder `dir` (and its parents) for outputs.
pub fn create_dir(dir: &std::path::Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| {
        Error::output(crate::io::OutputError::Write {
            path: dir.display().to_string(),
            source,
        })
    })
}

/// Read a timeline file (`timeline-*.json`, `measured-*.json`, `predicted-*.json`).
pub fn read_timeline(path: &std::path::Path) -> Result<crate::timeline::Timeline, Error> {
    let f = read_timeline_file(path)?;
    crate::timeline::Timeline::try_from(f).map_err(|e| Error::input(FileError::new(path, e)))
}

/// A timeline file's contents as written (µs as in the file), checked as
/// [`read_timeline`] checks them.
pub fn read_timeline_file(
    path: &std::path::Path,
) -> Result<crate::timeline::file::TimelineFile, Error> {
    use crate::timeline::{Timeline, file::TimelineFile};
    let text = read_text(path, crate::io::MAX_DATA_BYTES)?;
    let f: TimelineFile = serde_json::from_str(&text).map_err(|e| {
        Error::input(FileError::new(
            path,
            format!("not a flashoverlap timeline: {e}"),
        ))
    })?;
    Timeline::try_from(f.clone()).map_err(|e| Error::input(FileError::new(path, e)))?;
    Ok(f)
}
