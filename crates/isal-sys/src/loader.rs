//! Finding and opening `libisal.so.2` at run time.
//!
//! Search order: the directory in `ISAL_LIB_DIR` (when set, it is the only place looked
//! at, so an operator's choice is never silently replaced); else the system's dynamic
//! loader by soname (`LD_LIBRARY_PATH`, `ld.so.cache`, the default directories), as
//! for any other shared library. A library the loader finds but cannot load (a
//! damaged file, a wrong ABI, a missing function) is an error that says so.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use crate::ffi::IsalLibrary;

/// The file name (and soname) of the ISA-L library this crate's bindings describe.
pub const LIBRARY_FILE: &str = "libisal.so.2";

/// What [`search_dirs`] calls the system loader's own search, in messages.
const SYSTEM_PATH: &str = "the system library path";

/// An opened ISA-L library: its function table and where it was found.
pub struct Isal {
    functions: IsalLibrary,
    path: PathBuf,
}

impl std::fmt::Debug for Isal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Isal").field("path", &self.path).finish()
    }
}

impl Isal {
    /// The igzip functions kpress calls.
    pub fn functions(&self) -> &IsalLibrary {
        &self.functions
    }

    /// The path the library was opened from (the soname when the system loader found it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file this library's code was mapped from, as the dynamic loader resolved
    /// it (`dladdr` on one of its functions): which copy is in use, whatever the search
    /// found, even when the process has several open.
    pub fn mapped_file(&self) -> Option<PathBuf> {
        let function = self.functions.isal_inflate as *const std::ffi::c_void;
        let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
        // SAFETY: `function` is an address inside this open library; dladdr only
        // fills `info`, whose `dli_fname` points at the loader's own string for as long
        // as the library stays open (it is copied before `self` can be dropped).
        unsafe {
            if libc::dladdr(function, info.as_mut_ptr()) == 0 {
                return None;
            }
            let name = info.assume_init().dli_fname;
            if name.is_null() {
                return None;
            }
            let name = std::ffi::CStr::from_ptr(name).to_bytes();
            Some(PathBuf::from(std::ffi::OsStr::from_bytes(name)))
        }
    }
}

/// Why ISA-L could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// No directory searched held the library and the system loader did not find it.
    #[error("ISA-L library {LIBRARY_FILE} not found (searched {}; install libisal2 or set ISAL_LIB_DIR to the directory holding it)", searched.join(", "))]
    NotFound { searched: Vec<String> },
    /// A file was there but could not be opened or lacks a function kpress needs.
    #[error("ISA-L library {path} could not be opened: {reason}")]
    Open { path: String, reason: String },
}

/// Where [`load`] looks: the `ISAL_LIB_DIR` directory when set, else `None`, the
/// system loader's search.
pub fn search_dirs() -> Vec<Option<PathBuf>> {
    match std::env::var_os("ISAL_LIB_DIR") {
        Some(dir) => vec![Some(PathBuf::from(dir))],
        None => vec![None],
    }
}

/// Opens ISA-L once per process, searching [`search_dirs`]; later calls return the
/// same library or the same error.
pub fn load() -> Result<&'static Isal, LoadError> {
    static LOADED: OnceLock<Result<Isal, LoadError>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let mut searched = Vec::new();
            for dir in search_dirs() {
                let found = match dir {
                    Some(dir) => load_from_dir(&dir),
                    None => open_by_soname(),
                };
                match found {
                    Err(LoadError::NotFound { searched: where_ }) => searched.extend(where_),
                    found => return found,
                }
            }
            Err(LoadError::NotFound { searched })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Opens `dir/libisal.so.2`. Each call opens it again (the system loader shares one
/// copy); use [`load`] normally.
pub fn load_from_dir(dir: &Path) -> Result<Isal, LoadError> {
    let path = dir.join(LIBRARY_FILE);
    if !path.is_file() {
        return Err(LoadError::NotFound {
            searched: vec![dir.display().to_string()],
        });
    }
    // SAFETY: opening ISA-L runs only its (trivial) initialisers; it is the library the
    // operator installed for this purpose, with the ABI the bindings were generated from.
    let library = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) };
    let library = library.map_err(|e| LoadError::Open {
        path: path.display().to_string(),
        reason: describe(&e),
    })?;
    from_library(library, path)
}

/// Opens ISA-L through the system's dynamic loader. Only a loader that finds no
/// `libisal.so.2` at all is "not found"; one it finds but cannot load is an error.
fn open_by_soname() -> Result<Isal, LoadError> {
    // SAFETY: as in `load_from_dir`.
    let library = unsafe { Library::open(Some(LIBRARY_FILE), RTLD_NOW | RTLD_LOCAL) };
    match library {
        Ok(library) => from_library(library, PathBuf::from(LIBRARY_FILE)),
        Err(e) => {
            let reason = describe(&e);
            // glibc's dlerror for a name it finds nowhere: "<name>: cannot open shared
            // object file: ..."; a file found but unusable gets another message.
            let nowhere = format!("dlopen failed: {LIBRARY_FILE}: cannot open shared object file");
            if reason.starts_with(&nowhere) {
                Err(LoadError::NotFound {
                    searched: vec![SYSTEM_PATH.to_owned()],
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

fn from_library(library: Library, path: PathBuf) -> Result<Isal, LoadError> {
    // SAFETY: the symbols are looked up by the names and C signatures of igzip_lib.h,
    // which bindgen took from the header of the same library version (the soname
    // changes when ISA-L breaks its ABI).
    let functions = unsafe { IsalLibrary::from_library(library) }.map_err(|e| LoadError::Open {
        path: path.display().to_string(),
        reason: describe(&e),
    })?;
    Ok(Isal { functions, path })
}
