//! An indenting text writer for the generated source.

#[derive(Default)]
pub(crate) struct Writer {
    out: String,
    indent: usize,
}

impl Writer {
    pub(crate) fn new(indent: usize) -> Writer {
        Writer {
            out: String::new(),
            indent,
        }
    }

    /// One line at the current indentation.
    pub(crate) fn line(&mut self, text: impl AsRef<str>) {
        let text = text.as_ref();
        if text.is_empty() {
            self.out.push('\n');
            return;
        }
        for _ in 0..self.indent {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// `head {` and indent.
    pub(crate) fn open(&mut self, head: impl AsRef<str>) {
        let head = head.as_ref();
        if head.is_empty() {
            self.line("{");
        } else {
            self.line(format!("{head} {{"));
        }
        self.indent += 1;
    }

    /// Dedent and `}` (followed by `tail`, e.g. ` else {`).
    pub(crate) fn close(&mut self) {
        self.indent -= 1;
        self.line("}");
    }

    /// Dedent, `} else {`, indent.
    pub(crate) fn else_(&mut self) {
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
    }

    /// A writer for text that will go here (`append`ed later), at the current indentation.
    pub(crate) fn nested(&self) -> Writer {
        Writer::new(self.indent)
    }

    /// Text of a [`Self::nested`] writer, as it is.
    pub(crate) fn append(&mut self, text: &str) {
        self.out.push_str(text);
    }

    pub(crate) fn finish(self) -> String {
        self.out
    }
}
