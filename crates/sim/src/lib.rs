//! carmine-sim (being written)
