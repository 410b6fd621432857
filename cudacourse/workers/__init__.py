"""Worker processes that run learner code for the checking process, each behind the one worker channel.

======================  =================================================================================
``channel.py``          start a worker in the sandbox, ask with a deadline, see it die, stop it, its log
``gpu.py``              the GPU worker's client: a kernel library on the cuda backend while grading
                        (tensors cross as exported CUDA allocations, JSON lines with file descriptors)
``gpu_serve.py``        the GPU worker's program (standard library and ctypes only)
``torch.py``            the torch worker's client: a torch-route file or a Python exercise file
``torch_serve.py``      the torch worker's program
``wire.py``             the torch worker's frames, values and errors (both sides import it)
``exports.py``          the checking process's objects a torch worker may call back
======================  =================================================================================

The simulator's worker (``cudacourse/sim/_worker.py``, client ``sim.SimLibrary`` in ``sim/library.py``) is a
client of ``channel.py`` too; it lives with the simulator.
"""
