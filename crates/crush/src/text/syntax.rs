//! Tokens and the syntax tree of Ceph's text form, following the grammar of
//! Ceph's `src/crush/grammar.h`. Semantics live in `compile.rs`.

use super::ParseError;

/// A token and the line it sits on.
#[derive(Clone, Debug)]
pub(super) struct Token<'a> {
    pub(super) text: &'a str,
    pub(super) line: usize,
}

/// Splits text into tokens: comments (`#` to end of line) dropped, words
/// split on whitespace, and `{ } [ ]` always tokens of their own.
pub(super) fn tokenize(text: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_number = index + 1;
        let code = line.split('#').next().unwrap_or("");
        let mut start = None;
        for (at, ch) in code.char_indices() {
            let is_bracket = matches!(ch, '{' | '}' | '[' | ']');
            if ch.is_whitespace() || is_bracket {
                if let Some(begin) = start.take() {
                    tokens.push(Token {
                        text: &code[begin..at],
                        line: line_number,
                    });
                }
                if is_bracket {
                    tokens.push(Token {
                        text: &code[at..at + 1],
                        line: line_number,
                    });
                }
            } else if start.is_none() {
                start = Some(at);
            }
        }
        if let Some(begin) = start {
            tokens.push(Token {
                text: &code[begin..],
                line: line_number,
            });
        }
    }
    tokens
}

/// One top-level statement.
#[derive(Clone, Debug)]
pub(super) enum Statement {
    Tunable {
        name: String,
        value: i64,
        line: usize,
    },
    Device {
        id: i64,
        name: String,
        class: Option<String>,
        line: usize,
    },
    Type {
        id: i64,
        name: String,
        line: usize,
    },
    Bucket(BucketSyntax),
    Rule(RuleSyntax),
    ChooseArgs {
        index: i64,
        args: Vec<ChooseArgSyntax>,
        line: usize,
    },
}

#[derive(Clone, Debug)]
pub(super) struct BucketSyntax {
    pub(super) type_name: String,
    pub(super) name: String,
    pub(super) line: usize,
    pub(super) lines: Vec<(BucketLine, usize)>,
}

#[derive(Clone, Debug)]
pub(super) enum BucketLine {
    Id {
        id: i64,
        class: Option<String>,
    },
    Alg(String),
    Hash(String),
    Item {
        name: String,
        weight: Option<f32>,
        pos: Option<i64>,
    },
}

#[derive(Clone, Debug)]
pub(super) struct RuleSyntax {
    pub(super) name: Option<String>,
    pub(super) id: i64,
    pub(super) rule_type: String,
    pub(super) min_size: i64,
    pub(super) max_size: i64,
    pub(super) steps: Vec<(StepSyntax, usize)>,
    pub(super) line: usize,
}

#[derive(Clone, Debug)]
pub(super) enum StepSyntax {
    Take {
        item: String,
        class: Option<String>,
    },
    Set {
        name: String,
        value: i64,
    },
    Choose {
        leaf: bool,
        firstn: bool,
        count: i64,
        type_name: String,
    },
    Emit,
    Noop,
}

#[derive(Clone, Debug)]
pub(super) struct ChooseArgSyntax {
    pub(super) bucket_id: i64,
    pub(super) weight_set: Option<Vec<Vec<f32>>>,
    pub(super) ids: Option<Vec<i64>>,
    pub(super) line: usize,
}

/// The `set_*` step names Ceph knows.
pub(super) const SET_STEPS: [&str; 6] = [
    "set_choose_tries",
    "set_choose_local_tries",
    "set_choose_local_fallback_tries",
    "set_chooseleaf_tries",
    "set_chooseleaf_vary_r",
    "set_chooseleaf_stable",
];

/// A cursor over the tokens with helpers that report what was expected.
pub(super) struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    at: usize,
}

impl<'a> Parser<'a> {
    pub(super) fn new(text: &'a str) -> Parser<'a> {
        Parser {
            tokens: tokenize(text),
            at: 0,
        }
    }

    fn peek(&self) -> Option<&'a str> {
        self.tokens.get(self.at).map(|token| token.text)
    }

    /// The line of the next token (or of the last one at the end).
    fn line(&self) -> usize {
        self.tokens
            .get(self.at)
            .or_else(|| self.tokens.last())
            .map_or(1, |token| token.line)
    }

    fn error(&self, expected: &str) -> ParseError {
        let found = match self.peek() {
            Some(text) => format!("'{text}'"),
            None => "end of input".to_string(),
        };
        ParseError::new(self.line(), format!("expected {expected}, found {found}"))
    }

    fn next(&mut self, expected: &str) -> Result<&'a str, ParseError> {
        let token = self
            .tokens
            .get(self.at)
            .ok_or_else(|| self.error(expected))?;
        self.at += 1;
        Ok(token.text)
    }

    fn keyword(&mut self, keyword: &str) -> Result<(), ParseError> {
        if self.peek() == Some(keyword) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(&format!("'{keyword}'")))
        }
    }

    fn eat(&mut self, keyword: &str) -> bool {
        if self.peek() == Some(keyword) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn name(&mut self, what: &str) -> Result<String, ParseError> {
        match self.peek() {
            Some(text) if is_name(text) => {
                self.at += 1;
                Ok(text.to_string())
            }
            _ => Err(self.error(what)),
        }
    }

    /// An integer in Ceph's sense: `-`? digits, read like C's `strtol`.
    fn integer(&mut self, what: &str, sign: Sign) -> Result<i64, ParseError> {
        let Some(text) = self.peek() else {
            return Err(self.error(what));
        };
        let digits = text.strip_prefix('-');
        let ok = match sign {
            Sign::Positive => digits.is_none(),
            Sign::Negative => digits.is_some(),
            Sign::Any => true,
        };
        let body = digits.unwrap_or(text);
        if !ok || body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.error(what));
        }
        self.at += 1;
        Ok(strtol(text))
    }

    /// A real number as Spirit's `real_p` accepts it, converted like `strtof`.
    fn real(&mut self, what: &str) -> Result<f32, ParseError> {
        let Some(text) = self.peek() else {
            return Err(self.error(what));
        };
        let looks_numeric = text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'))
            && text.bytes().any(|b| b.is_ascii_digit());
        match text.parse::<f32>() {
            Ok(value) if looks_numeric => {
                self.at += 1;
                Ok(value)
            }
            _ => Err(self.error(what)),
        }
    }

    pub(super) fn statements(&mut self) -> Result<Vec<Statement>, ParseError> {
        let mut statements = Vec::new();
        while let Some(word) = self.peek() {
            let line = self.line();
            let statement = match word {
                "tunable" => {
                    self.at += 1;
                    let name = self.name("a tunable name")?;
                    let value = self.integer("a non-negative tunable value", Sign::Positive)?;
                    Statement::Tunable { name, value, line }
                }
                "device" => self.device()?,
                "type" => {
                    self.at += 1;
                    let id = self.integer("a non-negative type id", Sign::Positive)?;
                    Statement::Type {
                        id,
                        name: self.name("a type name")?,
                        line,
                    }
                }
                "rule" => Statement::Rule(self.rule()?),
                "choose_args" => self.choose_args()?,
                _ => Statement::Bucket(self.bucket()?),
            };
            statements.push(statement);
        }
        Ok(statements)
    }

    fn device(&mut self) -> Result<Statement, ParseError> {
        let line = self.line();
        self.keyword("device")?;
        let id = self.integer("a non-negative device id", Sign::Positive)?;
        let name = self.name("a device name")?;
        let class = if self.eat("class") {
            Some(self.name("a device class name")?)
        } else {
            None
        };
        Ok(Statement::Device {
            id,
            name,
            class,
            line,
        })
    }

    fn bucket(&mut self) -> Result<BucketSyntax, ParseError> {
        let line = self.line();
        let type_name =
            self.name("a statement (tunable, device, type, a bucket, rule or choose_args)")?;
        let name = self.name("a bucket name")?;
        self.keyword("{")?;
        let mut lines = Vec::new();
        loop {
            let line = self.line();
            let entry = match self.peek() {
                Some("}") => {
                    self.at += 1;
                    break;
                }
                Some("id") => {
                    self.at += 1;
                    let id = self.integer("a negative bucket id", Sign::Negative)?;
                    let class = if self.eat("class") {
                        Some(self.name("a device class name")?)
                    } else {
                        None
                    };
                    BucketLine::Id { id, class }
                }
                Some("alg") => {
                    self.at += 1;
                    BucketLine::Alg(self.name("a bucket algorithm")?)
                }
                Some("hash") => {
                    self.at += 1;
                    BucketLine::Hash(self.name("a hash (rjenkins1 or a number)")?)
                }
                Some("item") => self.bucket_item()?,
                _ => return Err(self.error("'id', 'alg', 'hash', 'item' or '}' in a bucket")),
            };
            lines.push((entry, line));
        }
        Ok(BucketSyntax {
            type_name,
            name,
            line,
            lines,
        })
    }

    fn bucket_item(&mut self) -> Result<BucketLine, ParseError> {
        self.keyword("item")?;
        let name = self.name("an item name")?;
        let weight = if self.eat("weight") {
            Some(self.real("an item weight")?)
        } else {
            None
        };
        let pos = if self.eat("pos") {
            Some(self.integer("a non-negative position", Sign::Positive)?)
        } else {
            None
        };
        Ok(BucketLine::Item { name, weight, pos })
    }

    fn rule(&mut self) -> Result<RuleSyntax, ParseError> {
        let line = self.line();
        self.keyword("rule")?;
        let name = if self.peek() == Some("{") {
            None
        } else {
            Some(self.name("a rule name or '{'")?)
        };
        self.keyword("{")?;
        if !self.eat("id") {
            self.keyword("ruleset")
                .map_err(|_| self.error("'id' or 'ruleset'"))?;
        }
        let id = self.integer("a non-negative rule id", Sign::Positive)?;
        self.keyword("type")?;
        let rule_type = self.name("'replicated' or 'erasure'")?;
        if rule_type != "replicated" && rule_type != "erasure" {
            self.at -= 1;
            return Err(self.error("'replicated' or 'erasure'"));
        }
        let (mut min_size, mut max_size) = (1, 10);
        if self.eat("min_size") {
            min_size = self.integer("a non-negative min_size", Sign::Positive)?;
        }
        if self.eat("max_size") {
            max_size = self.integer("a non-negative max_size", Sign::Positive)?;
        }
        let mut steps = Vec::new();
        while self.peek() != Some("}") {
            let step_line = self.line();
            steps.push((self.step()?, step_line));
        }
        if steps.is_empty() {
            return Err(self.error("a 'step'"));
        }
        self.keyword("}")?;
        Ok(RuleSyntax {
            name,
            id,
            rule_type,
            min_size,
            max_size,
            steps,
            line,
        })
    }

    fn step(&mut self) -> Result<StepSyntax, ParseError> {
        self.keyword("step")
            .map_err(|_| self.error("'step' or '}'"))?;
        let op = self.next("a step operation")?;
        Ok(match op {
            "take" => {
                let item = self.name("an item name")?;
                let class = if self.eat("class") {
                    Some(self.name("a device class name")?)
                } else {
                    None
                };
                StepSyntax::Take { item, class }
            }
            "emit" => StepSyntax::Emit,
            "noop" => StepSyntax::Noop,
            "choose" | "chooseleaf" => {
                let mode = self.next("'firstn' or 'indep'")?;
                if mode != "firstn" && mode != "indep" {
                    self.at -= 1;
                    return Err(self.error("'firstn' or 'indep'"));
                }
                let count = self.integer("a replica count", Sign::Any)?;
                self.keyword("type")?;
                let type_name = self.name("a type name")?;
                StepSyntax::Choose {
                    leaf: op == "chooseleaf",
                    firstn: mode == "firstn",
                    count,
                    type_name,
                }
            }
            _ if SET_STEPS.contains(&op) => {
                let value = self.integer("a non-negative value", Sign::Positive)?;
                StepSyntax::Set {
                    name: op.to_string(),
                    value,
                }
            }
            _ => {
                self.at -= 1;
                return Err(self.error("take, choose, chooseleaf, emit or a set_* step"));
            }
        })
    }

    fn choose_args(&mut self) -> Result<Statement, ParseError> {
        let line = self.line();
        self.keyword("choose_args")?;
        let index = self.integer("a non-negative choose_args index", Sign::Positive)?;
        self.keyword("{")?;
        let mut args = Vec::new();
        while !self.eat("}") {
            let arg_line = self.line();
            self.keyword("{").map_err(|_| self.error("'{' or '}'"))?;
            self.keyword("bucket_id")?;
            let bucket_id = self.integer("a negative bucket id", Sign::Negative)?;
            let weight_set = if self.eat("weight_set") {
                Some(self.weight_set()?)
            } else {
                None
            };
            let ids = if self.eat("ids") {
                Some(self.id_list()?)
            } else {
                None
            };
            self.keyword("}")?;
            args.push(ChooseArgSyntax {
                bucket_id,
                weight_set,
                ids,
                line: arg_line,
            });
        }
        Ok(Statement::ChooseArgs { index, args, line })
    }

    fn weight_set(&mut self) -> Result<Vec<Vec<f32>>, ParseError> {
        self.keyword("[")?;
        let mut rows = Vec::new();
        while !self.eat("]") {
            self.keyword("[").map_err(|_| self.error("'[' or ']'"))?;
            let mut row = Vec::new();
            while !self.eat("]") {
                row.push(self.real("a weight or ']'")?);
            }
            rows.push(row);
        }
        Ok(rows)
    }

    fn id_list(&mut self) -> Result<Vec<i64>, ParseError> {
        self.keyword("[")?;
        let mut ids = Vec::new();
        while !self.eat("]") {
            ids.push(self.integer("an id or ']'", Sign::Any)?);
        }
        Ok(ids)
    }
}

/// Which signs an integer may carry.
#[derive(Clone, Copy)]
pub(super) enum Sign {
    Positive,
    Negative,
    Any,
}

/// Ceph's names: letters, digits, `-`, `_` and `.`.
pub(super) fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// C's `strtol(text, 0, 10)`: saturates at the `long` range.
pub(super) fn strtol(text: &str) -> i64 {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let mut value: i128 = 0;
    for byte in digits.bytes() {
        value = (value * 10 + i128::from(byte - b'0')).min(i128::from(i64::MAX) + 1);
    }
    let value = if negative { -value } else { value };
    value.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}
