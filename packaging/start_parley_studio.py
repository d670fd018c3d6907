"""What the frozen Parley Studio runs: the editor's own ``main``.

PyInstaller needs a script, not a ``module:function`` entry point, so this file is
the ``parley-studio`` executable's body. ``--self-test`` and ``--screenshot`` are
handled by ``editor.app``.
"""

import sys

from editor.app import main

if __name__ == "__main__":
    sys.exit(main())
