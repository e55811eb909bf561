"""``python -m keras_app`` = ``python -m keras_app.train``."""
import sys

from keras_app.train import main

sys.exit(main())
