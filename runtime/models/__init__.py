"""Model files: the models folder and the sample model (``folder``), reading GGUF headers
(``gguf``), llama.cpp's context settings, and the memory formulas that need no asset (``memory``)."""
