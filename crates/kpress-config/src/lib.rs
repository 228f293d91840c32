//! kpress's TOML policy file (being written).
