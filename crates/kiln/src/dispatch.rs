//! The one dispatch point every tensor op goes through.
