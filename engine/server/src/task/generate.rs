//! A generation request streamed from the compute thread: the task's input
//! ([`GenerateSpec`]), the events it sends as it goes ([`GenEvent`]), and the part of the
//! running job that turns each sampled token into those events ([`GenOutput`]).
//!
//! Every token is sent as soon as it is sampled, its text through [`TextOut`] (whole
//! characters, never stop text). The events go through an unbounded channel, so the
//! compute thread never waits on a client. The front end holds the receiver for as long
//! as the client is there, streamed or not: when the client goes away the receiver is
//! dropped, and the job stops at its next step ([`GenOutput::is_abandoned`]).

use std::ops::ControlFlow;

use tokio::sync::mpsc;

use super::DecodeSpec;
use crate::task::text_out::TextOut;
use crate::task_error::TaskError;
use hydra_engine_core::logprobs::{token_logprob, TokenLogprob};
use hydra_engine_core::sampling::StopReason;
use hydra_engine_core::slots::Logits;
use hydra_engine_core::tokenizer::Tokenizer;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateSpec {
    /// The whole prompt.
    pub tokens: Vec<u32>,
    /// Reuse the prefix of the prompt the slot already holds (llama.cpp's `cache_prompt`);
    /// otherwise the slot is emptied first.
    pub cache_prompt: bool,
    /// Length and sampling.
    pub decode: DecodeSpec,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Log-probabilities of each token, with this many alternatives.
    pub logprobs: Option<usize>,
}

/// One generated token as the client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenOut {
    /// The token (None: the text held back at the end, flushed).
    pub id: Option<u32>,
    /// Text released with it (possibly empty, possibly text of earlier tokens).
    pub text: String,
    /// Its log-probability, when asked for.
    pub logprob: Option<TokenLogprob>,
}

/// How a generation went.
#[derive(Debug, Clone, PartialEq)]
pub struct GenSummary {
    /// The task (the segment's `TASK_ID`).
    pub task_id: u64,
    /// Why it ended.
    pub finish: StopReason,
    /// Prompt tokens in all.
    pub n_prompt: usize,
    /// Of them, reused from the slot's cache.
    pub n_cached: usize,
    /// Generated tokens (the stop string's and EOS not counted out: all that were sampled
    /// and put in the cache).
    pub tokens: Vec<u32>,
    /// Tokens the slot holds now.
    pub n_past: usize,
    /// Prompt evaluation, ms.
    pub prompt_ms: f64,
    /// Generation, ms.
    pub predicted_ms: f64,
    /// CPU time of the engine process during the generation, ms (all its threads).
    pub predicted_cpu_ms: f64,
}

/// What the compute thread tells the front end about a generation, in order.
#[derive(Debug)]
pub enum GenEvent {
    /// The task started: its id in the segment, and how much of the prompt the slot reused.
    Started {
        /// Segment `TASK_ID`.
        task_id: u64,
        /// Prompt tokens reused.
        n_cached: usize,
    },
    /// A prefill chunk is done (the details are in the segment).
    PromptChunk,
    /// A token.
    Token(TokenOut),
    /// The end.
    Done(GenSummary),
    /// It failed (nothing follows).
    Failed(TaskError),
}

/// The sending end of a generation's events.
pub type GenEvents = mpsc::UnboundedSender<GenEvent>;

/// The output side of a running generation: turns tokens into events.
#[derive(Debug)]
pub struct GenOutput {
    events: GenEvents,
    text: TextOut,
    logprobs: Option<usize>,
}

impl GenOutput {
    /// Output for `spec`'s generation to `events`.
    pub fn new(spec: &GenerateSpec, events: GenEvents) -> Self {
        Self {
            events,
            text: TextOut::new(spec.stop.clone()),
            logprobs: spec.logprobs,
        }
    }

    /// Sends `event`; false when the client has gone.
    pub fn send(&self, event: GenEvent) -> bool {
        self.events.send(event).is_ok()
    }

    /// Whether the client has gone (its receiver dropped).
    pub fn is_abandoned(&self) -> bool {
        self.events.is_closed()
    }

    /// `token`, sampled from `logits`, is generated: send it; break with why the
    /// generation ends here (a stop string, or the client gone).
    pub fn token(
        &mut self,
        tokenizer: &Tokenizer,
        token: u32,
        logits: &Logits,
    ) -> ControlFlow<StopReason> {
        let bytes = tokenizer.token_bytes(token).unwrap_or_default();
        let piece = self.text.push(bytes);
        let logprob = self.logprobs.map(|n| token_logprob(logits, token, n));
        let sent = self.send(GenEvent::Token(TokenOut {
            id: Some(token),
            text: piece.text,
            logprob,
        }));
        if !sent {
            ControlFlow::Break(StopReason::Cancelled)
        } else if piece.stopped {
            ControlFlow::Break(StopReason::StopWord)
        } else {
            ControlFlow::Continue(())
        }
    }

    /// The generation ended: flush the text held back, then send the summary.
    pub fn finish(mut self, summary: GenSummary) {
        if summary.finish != StopReason::StopWord {
            let tail = self.text.finish();
            if !tail.text.is_empty() {
                self.send(GenEvent::Token(TokenOut {
                    id: None,
                    text: tail.text,
                    logprob: None,
                }));
            }
        }
        self.send(GenEvent::Done(summary));
    }

    /// The generation failed.
    pub fn fail(self, error: TaskError) {
        self.send(GenEvent::Failed(error));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_engine_core::sampling::SamplerConfig;

    fn spec(stop: &[&str], logprobs: Option<usize>) -> GenerateSpec {
        GenerateSpec {
            tokens: vec![1],
            cache_prompt: true,
            decode: DecodeSpec {
                n_predict: 8,
                sampler: SamplerConfig::greedy(),
                stop_at_eos: true,
            },
            stop: stop.iter().map(|s| s.to_string()).collect(),
            logprobs,
        }
    }

    fn summary(finish: StopReason) -> GenSummary {
        GenSummary {
            task_id: 1,
            finish,
            n_prompt: 1,
            n_cached: 0,
            tokens: vec![],
            n_past: 1,
            prompt_ms: 0.0,
            predicted_ms: 0.0,
            predicted_cpu_ms: 0.0,
        }
    }

    #[test]
    fn tokens_become_events_until_the_stop_string() {
        let tok = Tokenizer::bytes();
        let logits = Logits::from(vec![0.0; tok.vocab_size()]);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut out = GenOutput::new(&spec(&["lo!"], Some(1)), tx);
        for b in *b"hel" {
            assert!(out.token(&tok, u32::from(b), &logits).is_continue());
        }
        assert_eq!(
            out.token(&tok, u32::from(b'o'), &logits),
            ControlFlow::Continue(())
        );
        assert_eq!(
            out.token(&tok, u32::from(b'!'), &logits),
            ControlFlow::Break(StopReason::StopWord)
        );
        out.finish(summary(StopReason::StopWord));
        let mut text = String::new();
        let mut n = 0;
        while let Ok(e) = rx.try_recv() {
            match e {
                GenEvent::Token(t) => {
                    text.push_str(&t.text);
                    let lp = t.logprob.expect("asked for logprobs");
                    assert_eq!(lp.top.len(), 1);
                    assert!((lp.logprob - -(tok.vocab_size() as f32).ln()).abs() < 1e-4);
                    n += 1;
                }
                GenEvent::Done(s) => assert_eq!(s.finish, StopReason::StopWord),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((text.as_str(), n), ("he", 5));
    }

    #[test]
    fn held_text_is_flushed_and_a_gone_client_cancels() {
        let tok = Tokenizer::bytes();
        let logits = Logits::from(vec![0.0; tok.vocab_size()]);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut out = GenOutput::new(&spec(&["xyz"], None), tx);
        assert!(out.token(&tok, u32::from(b'x'), &logits).is_continue());
        out.finish(summary(StopReason::Length));
        let texts: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|e| match e {
                GenEvent::Token(t) => Some(t.text),
                _ => None,
            })
            .collect();
        assert_eq!(texts, vec!["".to_string(), "x".to_string()]);

        let (tx, rx) = mpsc::unbounded_channel();
        let mut out = GenOutput::new(&spec(&[], None), tx);
        assert!(!out.is_abandoned());
        drop(rx);
        assert!(out.is_abandoned());
        assert_eq!(
            out.token(&tok, u32::from(b'a'), &logits),
            ControlFlow::Break(StopReason::Cancelled)
        );
    }
}
