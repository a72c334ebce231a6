//! The record file: a one-line header with the generation and the [`Listing`] class, then
//! the value (see the [module docs](super)).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use bytes::Bytes;

use crate::store::{Listing, Version, Versioned};

pub(super) const HEADER: &str = "parqdb-pointer ";

/// One record file: its generation, its class (if the header has one) and its value.
pub(super) struct Record {
    pub(super) generation: u64,
    pub(super) listing: Option<Listing>,
    pub(super) value: Bytes,
}

pub(super) fn class_name(listing: Listing) -> &'static str {
    match listing {
        Listing::Hidden => "hidden",
        Listing::Shown => "shown",
        Listing::Check => "check",
    }
}

/// Read a record file: `None` if absent.
pub(super) fn read_record(path: &Path) -> io::Result<Option<Record>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let corrupt = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a pointer file", path.display()),
        )
    };
    let newline = bytes.iter().position(|&b| b == b'\n').ok_or_else(corrupt)?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| corrupt())?;
    let mut fields = header.strip_prefix(HEADER).ok_or_else(corrupt)?.split(' ');
    let generation = fields
        .next()
        .and_then(|g| g.parse::<u64>().ok())
        .ok_or_else(corrupt)?;
    let listing = match fields.next() {
        None => None,
        Some("hidden") => Some(Listing::Hidden),
        Some("shown") => Some(Listing::Shown),
        Some("check") => Some(Listing::Check),
        Some(_) => return Err(corrupt()),
    };
    if fields.next().is_some() {
        return Err(corrupt());
    }
    Ok(Some(Record {
        generation,
        listing,
        value: Bytes::copy_from_slice(&bytes[newline + 1..]),
    }))
}

pub(super) fn versioned(record: Record) -> Versioned {
    Versioned {
        value: record.value,
        version: Version::new(record.generation.to_string()),
    }
}
