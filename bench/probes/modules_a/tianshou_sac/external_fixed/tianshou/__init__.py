from tianshou.data import Batch
from tianshou.policy import SACPolicy
