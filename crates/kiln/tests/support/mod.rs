#![allow(dead_code)] // each test file uses part of it

pub mod capture;
pub mod random_graph;
