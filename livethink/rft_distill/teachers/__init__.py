"""Teacher backends behind one interface (``base.Teacher``): k samples per task, streamed task by task.

Here: the scripted stand-in for a large verbose reasoner. Stage 1 adds the OpenAI-compatible endpoint, local
vLLM and transformers backends.
"""

from livethink.rft_distill.teachers.base import Sample, SamplingConfig, Teacher
from livethink.rft_distill.teachers.scripted import ScriptedTeacher, minimal_completion, minimal_trace

__all__ = ["Sample", "SamplingConfig", "ScriptedTeacher", "Teacher", "minimal_completion", "minimal_trace"]
