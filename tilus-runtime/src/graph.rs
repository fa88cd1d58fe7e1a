//! CUDA graphs: the launches of a piece of host code recorded once on a context's stream and
//! replayed with one call, without the host work of each launch (argument checks, plan
//! look-ups, the driver's launch path). Only work that neither allocates, tunes, compiles nor
//! waits for the GPU can be recorded: a layer's buckets are planned beforehand
//! (`reserve(max_m)` in the library's layers).

use crate::context::Context;
use crate::error::{Result, RuntimeError};
use cudarc::driver::{sys, CudaGraph};

/// A captured sequence of launches, replayed on the stream it was captured on.
pub struct Graph {
    graph: CudaGraph,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").finish_non_exhaustive()
    }
}

impl Graph {
    /// Queue one replay of every captured launch, in order, on the capturing context's stream.
    /// The launches read and write the buffers they were captured with.
    pub fn launch(&self) -> Result<()> {
        self.graph
            .launch()
            .map_err(|e| RuntimeError::driver("launching a CUDA graph", e))
    }

    /// Upload the graph's resources now, so that the first [`Graph::launch`] is as fast as the
    /// next ones.
    pub fn upload(&self) -> Result<()> {
        self.graph
            .upload()
            .map_err(|e| RuntimeError::driver("uploading a CUDA graph", e))
    }
}

impl Context {
    /// Whether [`Context::capture`] can record this context's launches: false on CUDA's legacy
    /// default stream (see [`crate::ContextBuilder::own_stream`]).
    pub fn can_capture(&self) -> bool {
        !self.stream().cu_stream().is_null()
    }

    /// Record the launches `work` queues on this context's stream into a [`Graph`] instead of
    /// running them. The context must have its own stream ([`crate::ContextBuilder::own_stream`]);
    /// CUDA refuses to capture the legacy default stream. Nothing runs until the graph is
    /// launched. `work` may return any error a [`RuntimeError`] converts into (the library's
    /// layer errors do). An error of `work`, or an operation CUDA cannot capture (a host copy,
    /// a synchronization), ends the capture and is returned; the stream is usable again
    /// afterwards.
    pub fn capture<E: From<RuntimeError>>(
        &self,
        work: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Graph, E> {
        let stream = self.stream();
        if !self.can_capture() {
            return Err(RuntimeError::Capture {
                reason: "this context launches on CUDA's legacy default stream, which cannot \
                         be captured; build it with Context::builder(ordinal).own_stream(true)"
                    .to_string(),
            }
            .into());
        }
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| RuntimeError::driver("beginning a graph capture", e))?;
        let recorded = work();
        let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        match (recorded, ended) {
            (Err(e), _) => Err(e),
            (Ok(()), Ok(Some(graph))) => Ok(Graph { graph }),
            (Ok(()), Ok(None)) => Err(RuntimeError::Capture {
                reason: "CUDA ended the capture without a graph (an operation in it could not \
                         be captured)"
                    .to_string(),
            }
            .into()),
            (Ok(()), Err(e)) => Err(RuntimeError::driver("ending a graph capture", e).into()),
        }
    }
}
