//! Ceph's text syntax for CRUSH maps, both ways: [`parse_text`] reads what
//! `crushtool -c` reads and builds the same map (shadow ids included);
//! [`CrushMap::to_text`] prints what `crushtool -d` prints.

mod classes;
mod compile;
mod print;
mod syntax;

use crate::map::CrushMap;

/// A text map that could not be compiled: the line and what went wrong
/// (for syntax errors, what was expected and what was found).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl ParseError {
    pub(crate) fn new(line: usize, message: String) -> ParseError {
        ParseError { line, message }
    }
}

/// Compiles a map in Ceph's text syntax (`crushtool -c`).
pub fn parse_text(text: &str) -> Result<CrushMap, ParseError> {
    let statements = syntax::Parser::new(text).statements()?;
    compile::Compiler::new().compile(statements)
}
