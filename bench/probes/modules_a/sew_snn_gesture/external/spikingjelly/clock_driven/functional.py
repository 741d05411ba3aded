def reset_net(net):
    """Reset the hidden states of all stateful modules in ``net``."""
    for m in net.modules():
        if hasattr(m, 'reset'):
            m.reset()
