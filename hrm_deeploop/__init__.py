"""hrm-deeploop: recurrent-depth reasoning models with DeepLoop residual scaling.

Importing this package does not import torch; the model modules do.
"""

__version__ = "0.1.0"
