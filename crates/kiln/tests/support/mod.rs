pub mod random_graph;
