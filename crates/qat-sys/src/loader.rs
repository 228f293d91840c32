//! Finding and opening `libqatzip.so.3` at run time.
//!
//! Search order: the directory in `QATZIP_LIB_DIR` (when set, it is the only place
//! looked at, so an operator's choice is never silently replaced); else the system's
//! dynamic loader by soname (`LD_LIBRARY_PATH`, `ld.so.cache`, the default
//! directories), as for any other shared library; only when that finds none, the
//! project cache `.cache/qatzip/root/usr/lib/x86_64-linux-gnu` that `scripts/setup.sh`
//! fills, so that the repository's tests and benches run QATzip on a host that has
//! none installed. A QATzip the host installed is always preferred to that cache.
//!
//! libqatzip needs `libqat.so.4` and `libusdm.so.0`. When they sit beside it in a
//! directory the system loader does not search, they are opened first with
//! `RTLD_GLOBAL`, so the loader finds them by soname when it resolves libqatzip.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use crate::ffi::QatzipLibrary;

/// The file name (and soname) of the QATzip library this crate's bindings describe.
pub const LIBRARY_FILE: &str = "libqatzip.so.3";
/// Libraries libqatzip links against that ship with it, in dependency order.
const COMPANIONS: [&str; 2] = ["libusdm.so.0", "libqat.so.4"];
/// The project cache of a checkout: the last place searched (see the module doc).
const CACHE_LIB_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../.cache/qatzip/root/usr/lib/x86_64-linux-gnu"
);

/// An opened QATzip library: its function table and where it was found.
pub struct Qatzip {
    functions: QatzipLibrary,
    path: PathBuf,
    // Kept open for as long as libqatzip is, which needs their symbols.
    _companions: Vec<Library>,
}

impl std::fmt::Debug for Qatzip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qatzip").field("path", &self.path).finish()
    }
}

impl Qatzip {
    /// The QATzip functions.
    pub fn functions(&self) -> &QatzipLibrary {
        &self.functions
    }

    /// The path the library was opened from (a soname when the system loader found it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file the process actually has mapped for libqatzip, read from
    /// `/proc/self/maps`: proof of which library is in use, whatever the search found.
    pub fn mapped_file(&self) -> Option<PathBuf> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .find(|file| file.contains("libqatzip.so"))
            .map(PathBuf::from)
    }
}

/// Why QATzip could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// No directory searched held the library and the system loader did not find it.
    #[error("QATzip library {LIBRARY_FILE} not found (searched {}; set QATZIP_LIB_DIR to the directory holding it)", searched.join(", "))]
    NotFound { searched: Vec<String> },
    /// A file was there but could not be opened or lacks a function kpress needs.
    #[error("QATzip library {path} could not be opened: {reason}")]
    Open { path: String, reason: String },
}

/// Where [`load`] looks, in order; `None` stands for the system loader path.
pub fn search_dirs() -> Vec<Option<PathBuf>> {
    match std::env::var_os("QATZIP_LIB_DIR") {
        Some(dir) => vec![Some(PathBuf::from(dir))],
        None => vec![None, Some(PathBuf::from(CACHE_LIB_DIR))],
    }
}

/// Opens QATzip once per process, searching [`search_dirs`]; later calls return the
/// same library or the same error.
pub fn load() -> Result<&'static Qatzip, LoadError> {
    static LOADED: OnceLock<Result<Qatzip, LoadError>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let mut searched = Vec::new();
            for dir in search_dirs() {
                match dir {
                    Some(dir) => {
                        if dir.join(LIBRARY_FILE).is_file() {
                            return load_from_dir(&dir);
                        }
                        searched.push(dir.display().to_string());
                    }
                    None => match open_by_soname() {
                        Ok(q) => return Ok(q),
                        Err(LoadError::NotFound { .. }) => {
                            searched.push("the system library path".to_owned())
                        }
                        Err(e) => return Err(e),
                    },
                }
            }
            Err(LoadError::NotFound { searched })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Opens `dir/libqatzip.so.3` with its companion libraries from the same directory.
/// Each call opens it again (the system loader shares one copy); use [`load`] normally.
pub fn load_from_dir(dir: &Path) -> Result<Qatzip, LoadError> {
    let path = dir.join(LIBRARY_FILE);
    if !path.is_file() {
        return Err(LoadError::NotFound {
            searched: vec![dir.display().to_string()],
        });
    }
    let mut companions = Vec::new();
    for name in COMPANIONS {
        let companion = dir.join(name);
        if companion.is_file() {
            companions.push(open(&companion)?);
        }
    }
    let library = open(&path)?;
    from_library(library, path, companions)
}

/// Opens QATzip through the system's dynamic loader. Only a loader that finds no
/// `libqatzip.so.3` at all is "not found"; one it finds but cannot load (a missing
/// dependency, a wrong ABI) is an error, never quietly replaced by another copy.
fn open_by_soname() -> Result<Qatzip, LoadError> {
    // SAFETY: opening QATzip runs its initialisers; it is the library the operator
    // installed for this purpose, with the ABI the bindings were generated from.
    let library = unsafe { Library::open(Some(LIBRARY_FILE), RTLD_NOW | RTLD_GLOBAL) };
    match library {
        Ok(library) => from_library(library, PathBuf::from(LIBRARY_FILE), Vec::new()),
        Err(e) => {
            let reason = describe(&e);
            // glibc's dlerror for a name it finds nowhere: "<name>: cannot open shared
            // object file: ..."; a dependency missing names the dependency instead.
            let nowhere = format!("dlopen failed: {LIBRARY_FILE}: cannot open shared object file");
            if reason.starts_with(&nowhere) {
                Err(LoadError::NotFound {
                    searched: vec!["the system library path".to_owned()],
                })
            } else {
                Err(LoadError::Open {
                    path: LIBRARY_FILE.to_owned(),
                    reason,
                })
            }
        }
    }
}

/// A libloading error with the system's own message (libloading's says only which
/// call failed and keeps `dlerror`'s text as its source).
fn describe(e: &libloading::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

fn open(path: &Path) -> Result<Library, LoadError> {
    // SAFETY: as in `open_by_soname`: a QATzip library or one of its companions.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| LoadError::Open {
        path: path.display().to_string(),
        reason: describe(&e),
    })
}

fn from_library(
    library: Library,
    path: PathBuf,
    companions: Vec<Library>,
) -> Result<Qatzip, LoadError> {
    // SAFETY: the symbols are looked up by the names and C signatures of qatzip.h,
    // which bindgen took from the header of the same library version.
    let functions =
        unsafe { QatzipLibrary::from_library(library) }.map_err(|e| LoadError::Open {
            path: path.display().to_string(),
            reason: describe(&e),
        })?;
    Ok(Qatzip {
        functions,
        path,
        _companions: companions,
    })
}
