//! Chat messages become a prompt through the model's chat template: the GGUF's
//! `tokenizer.chat_template` (a Jinja template written for Hugging Face's
//! `apply_chat_template`), or a file given with `--chat-template FILE`.
//!
//! Rendered with `minijinja` configured as `apply_chat_template` configures Jinja:
//! `trim_blocks` and `lstrip_blocks`, Python's string and dict methods
//! (`minijinja-contrib`'s pycompat: `.strip()`, `.startswith()`, `.items()`...),
//! `raise_exception(msg)`, and the variables `messages`, `add_generation_prompt`,
//! `bos_token` and `eos_token`. A template is compiled once, when the engine starts; a
//! broken one is an error then, not at the first request. Rendering runs on fuel, so a
//! hostile template (a file is data) cannot loop for ever.

use std::collections::BTreeMap;
use std::path::Path;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, ErrorKind, Value};

/// The template's name inside its environment.
const NAME: &str = "chat";

/// Instructions a render may execute; a chat prompt of thousands of messages needs a
/// small fraction of this, a template that loops for ever stops here.
const FUEL: u64 = 5_000_000;

/// A chat role, as templates spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the assistant.
    System,
    /// OpenAI's newer name for system instructions (given to templates as `system`).
    Developer,
    /// The person.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

impl Role {
    /// The role's name as a template sees it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System | Role::Developer => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a conversation, its content as plain text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What was said.
    pub content: String,
}

/// Where the template came from (for errors and logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The model file's `tokenizer.chat_template`.
    Gguf,
    /// `--chat-template FILE`.
    File(std::path::PathBuf),
}

impl std::fmt::Display for TemplateOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateOrigin::Gguf => f.write_str("the model's tokenizer.chat_template"),
            TemplateOrigin::File(p) => write!(f, "--chat-template {}", p.display()),
        }
    }
}

/// Why a template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template file could not be read.
    #[error("cannot read the chat template {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The template does not compile.
    #[error("the chat template from {origin} does not compile: {message}")]
    Compile {
        /// Where it came from.
        origin: TemplateOrigin,
        /// minijinja's description, with the line.
        message: String,
    },
    /// Rendering failed: the template refused the conversation (`raise_exception`), or
    /// failed on it.
    #[error("the chat template refused these messages: {0}")]
    Render(String),
}

/// A compiled chat template with the model's BOS and EOS texts.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    origin: TemplateOrigin,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// Compiles `source` (from `origin`) for a model whose BOS and EOS tokens read
    /// `bos_token` and `eos_token` (empty when it has none).
    pub fn new(
        source: &str,
        origin: TemplateOrigin,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Self, TemplateError> {
        let compile = |e: minijinja::Error| TemplateError::Compile {
            origin: origin.clone(),
            message: describe(&e),
        };
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(compile)?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("raise_exception", raise_exception);
        env.set_fuel(Some(FUEL));
        env.add_template_owned(NAME, source.to_owned())
            .map_err(compile)?;
        Ok(Self {
            env,
            origin,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// The template the engine serves with: `override_file` when given, else the model
    /// file's `gguf_template`; `Ok(None)` when there is neither (chat requests are then
    /// refused with a message saying so).
    pub fn select(
        override_file: Option<&Path>,
        gguf_template: Option<&str>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Option<Self>, TemplateError> {
        match (override_file, gguf_template) {
            (Some(path), _) => {
                let source =
                    std::fs::read_to_string(path).map_err(|source| TemplateError::Read {
                        path: path.to_owned(),
                        source,
                    })?;
                let origin = TemplateOrigin::File(path.to_owned());
                Self::new(&source, origin, bos_token, eos_token).map(Some)
            }
            (None, Some(source)) => {
                Self::new(source, TemplateOrigin::Gguf, bos_token, eos_token).map(Some)
            }
            (None, None) => Ok(None),
        }
    }

    /// Where the template came from.
    pub fn origin(&self) -> &TemplateOrigin {
        &self.origin
    }

    /// The prompt for `messages`; with `add_generation_prompt`, followed by what opens the
    /// assistant's turn.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                Value::from(BTreeMap::from([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(m.content.as_str())),
                ]))
            })
            .collect();
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| TemplateError::Render(describe(&e)))?;
        template
            .render(ctx)
            .map_err(|e| TemplateError::Render(describe(&e)))
    }
}

/// `raise_exception(message)`: how Hugging Face templates refuse a conversation.
fn raise_exception(message: String) -> Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// minijinja's error with its detail and the template line, in one line.
fn describe(e: &minijinja::Error) -> String {
    let mut s = match e.detail() {
        Some(d) if e.kind() == ErrorKind::InvalidOperation => d.to_owned(),
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    if let Some(line) = e.line() {
        s.push_str(&format!(" (template line {line})"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M-Instruct's `tokenizer.chat_template`, as its GGUF carries it.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    fn user(text: &str) -> Message {
        Message {
            role: Role::User,
            content: text.into(),
        }
    }

    #[test]
    fn smollm2_template_renders_chatml() {
        let t =
            ChatTemplate::new(SMOLLM2, TemplateOrigin::Gguf, "<|im_start|>", "<|im_end|>").unwrap();
        let p = t
            .render(&[user("What is the capital of France?")], true)
            .unwrap();
        assert_eq!(
            p,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
        );
        let sys = Message {
            role: Role::Developer,
            content: "Be brief.".into(),
        };
        let p = t.render(&[sys, user("Hi")], false).unwrap();
        assert_eq!(
            p,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
    }

    #[test]
    fn bos_eos_trim_and_python_methods() {
        // A Llama-2 style template: bos/eos, .strip(), raise_exception, block whitespace.
        let src = "{{ bos_token }}\n{% for m in messages %}\n  {% if m['role'] == 'user' %}\n[INST] {{ m['content'].strip() }} [/INST]\n  {% elif m['role'] == 'assistant' %}\n{{ m['content'] }}{{ eos_token }}\n  {% else %}\n{{ raise_exception('only user and assistant roles are supported') }}\n  {% endif %}\n{% endfor %}";
        let t = ChatTemplate::new(src, TemplateOrigin::Gguf, "<s>", "</s>").unwrap();
        let a = Message {
            role: Role::Assistant,
            content: "Hello".into(),
        };
        let p = t.render(&[user("  hi  "), a], true).unwrap();
        // trim_blocks drops the newline after a block tag, not after `{{ bos_token }}`.
        assert_eq!(p, "<s>\n[INST] hi [/INST]\nHello</s>\n");
        let sys = Message {
            role: Role::System,
            content: "x".into(),
        };
        let e = t.render(&[sys], true).unwrap_err();
        assert!(
            e.to_string()
                .contains("only user and assistant roles are supported"),
            "{e}"
        );
    }

    #[test]
    fn broken_and_endless_templates_are_errors() {
        let e =
            ChatTemplate::new("{% for m in messages %}", TemplateOrigin::Gguf, "", "").unwrap_err();
        assert!(matches!(e, TemplateError::Compile { .. }), "{e}");
        assert!(e.to_string().contains("tokenizer.chat_template"), "{e}");
        // Nested loops far beyond any chat: the fuel stops it, with an error.
        let src = "{% for a in range(10000) %}{% for b in range(10000) %}x{% endfor %}{% endfor %}";
        let t = ChatTemplate::new(src, TemplateOrigin::Gguf, "", "").unwrap();
        let e = t.render(&[user("hi")], true).unwrap_err();
        assert!(e.to_string().contains("fuel"), "{e}");
    }

    #[test]
    fn selection_prefers_the_file_and_reports_neither() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.jinja");
        std::fs::write(
            &file,
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}",
        )
        .unwrap();
        let t = ChatTemplate::select(Some(&file), Some(SMOLLM2), "", "")
            .unwrap()
            .unwrap();
        assert_eq!(t.origin(), &TemplateOrigin::File(file.clone()));
        assert_eq!(t.render(&[user("a")], true).unwrap(), "<user>a");
        let g = ChatTemplate::select(None, Some(SMOLLM2), "", "")
            .unwrap()
            .unwrap();
        assert_eq!(g.origin(), &TemplateOrigin::Gguf);
        assert!(ChatTemplate::select(None, None, "", "").unwrap().is_none());
        let missing = dir.path().join("none.jinja");
        let e = ChatTemplate::select(Some(&missing), None, "", "").unwrap_err();
        assert!(e.to_string().contains("none.jinja"), "{e}");
    }
}
