"""What the frozen Parley Studio runs: the editor's own ``main``.

PyInstaller needs a script, not a ``module:function`` entry point, so this file is
the ``parley-studio`` executable's body. ``--self-test`` and ``--screenshot`` are
handled by ``editor.app``. ``freeze_support`` lets the app be its own child process:
llama.cpp's self-check (runtime.backends.llama_build) decodes in one before the first model load.
"""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()  # in the self-check's child: runs it, then exits
    from editor.app import main

    sys.exit(main())
