//! The gzip providers (KIP-1121) this host has, as `run` logs them at start and
//! `check-config` prints them.
//!
//! Reading the policy file already probed QATzip if a policy names `qat` or `auto`;
//! otherwise QAT is reported "not probed" and QATzip is never loaded.

use kpress_codec::gzip_providers::{ProviderKind, ProviderStatus, Registry};

/// Every provider's status, without probing QATzip for a policy that does not use it.
pub(crate) fn statuses() -> Vec<ProviderStatus> {
    Registry::global().statuses_without_probing()
}

/// One line per provider: `qat: available, software: QATzip …: QZ_NO_HW …`.
pub(crate) fn describe(status: &ProviderStatus) -> String {
    let availability = if !status.available {
        "unavailable"
    } else if status.hardware {
        "available, hardware"
    } else {
        "available, software"
    };
    format!("{}: {availability}: {}", status.provider, status.detail)
}

/// Logs every status; QAT without a device (`QZ_NO_HW`) is a warning, since an
/// operator who configured QAT expects the accelerator.
pub(crate) fn log(statuses: &[ProviderStatus]) {
    for status in statuses {
        let line = describe(status);
        if status.provider == ProviderKind::Qat && status.available && !status.hardware {
            tracing::warn!(
                provider = %status.provider,
                available = status.available,
                hardware = status.hardware,
                "gzip provider {line}"
            );
        } else {
            tracing::info!(
                provider = %status.provider,
                available = status.available,
                hardware = status.hardware,
                "gzip provider {line}"
            );
        }
    }
}

/// [`statuses`] as JSON, for `--format json` outputs.
pub(crate) fn statuses_json() -> serde_json::Value {
    statuses()
        .iter()
        .map(|s| {
            serde_json::json!({
                "provider": s.provider.name(),
                "available": s.available,
                "hardware": s.hardware,
                "detail": s.detail,
            })
        })
        .collect()
}
