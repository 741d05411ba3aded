import torch
import torch.nn as nn
import torch.nn.functional as F


class Discriminator(nn.Module):
    def __init__(self, z_dim=32):
        super(Discriminator, self).__init__()

        # Inference over x
        self.conv1x = nn.Conv2d(3, 16, 5, stride=1, bias=False)
        self.conv2x, self.bn2x = nn.Conv2d(16, 32, 4, stride=2, bias=False), nn.BatchNorm2d(32)
        self.conv3x, self.bn3x = nn.Conv2d(32, 64, 4, stride=2, bias=False), nn.BatchNorm2d(64)
        self.conv4x, self.bn4x = nn.Conv2d(64, 128, 5, stride=1, bias=False), nn.BatchNorm2d(128)

        # Inference over z
        self.conv1z = nn.Conv2d(z_dim, 128, 1, stride=1, bias=False)
        self.conv2z = nn.Conv2d(128, 128, 1, stride=1, bias=False)

        # Joint inference
        self.conv1xz = nn.Conv2d(256, 256, 1, stride=1, bias=False)
        self.conv2xz = nn.Conv2d(256, 1, 1, stride=1, bias=True)

    def inf_x(self, x):
        x = F.dropout2d(F.leaky_relu(self.conv1x(x), negative_slope=0.1), 0.2)
        x = F.dropout2d(F.leaky_relu(self.bn2x(self.conv2x(x)), negative_slope=0.1), 0.2)
        x = F.dropout2d(F.leaky_relu(self.bn3x(self.conv3x(x)), negative_slope=0.1), 0.2)
        x = F.dropout2d(F.leaky_relu(self.bn4x(self.conv4x(x)), negative_slope=0.1), 0.2)
        return x

    def forward(self, x, z):
        x = self.inf_x(x)
        z = F.dropout2d(F.leaky_relu(self.conv1z(z), negative_slope=0.1), 0.2)
        z = F.dropout2d(F.leaky_relu(self.conv2z(z), negative_slope=0.1), 0.2)
        xz = torch.cat((x, z), dim=1)
        xz = F.dropout(F.leaky_relu(self.conv1xz(xz), negative_slope=0.1), 0.2)
        return torch.sigmoid(self.conv2xz(xz))


class Generator(nn.Module):
    def __init__(self, z_dim=32):
        super(Generator, self).__init__()
        self.z_dim = z_dim

        self.output_bias = nn.Parameter(torch.zeros(3, 32, 32), requires_grad=True)
        self.deconv1, self.bn1 = nn.ConvTranspose2d(z_dim, 128, 4, stride=1, bias=False), nn.BatchNorm2d(128)
        self.deconv2, self.bn2 = nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(64)
        self.deconv3, self.bn3 = nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(32)
        self.deconv4 = nn.ConvTranspose2d(32, 3, 4, stride=2, padding=1, bias=True)

    def forward(self, z):
        z = F.leaky_relu(self.bn1(self.deconv1(z)), negative_slope=0.1)
        z = F.leaky_relu(self.bn2(self.deconv2(z)), negative_slope=0.1)
        z = F.leaky_relu(self.bn3(self.deconv3(z)), negative_slope=0.1)
        return torch.tanh(self.deconv4(z) + self.output_bias)


class Encoder(nn.Module):
    def __init__(self, z_dim=32):
        super(Encoder, self).__init__()
        self.z_dim = z_dim
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 5, stride=1, bias=False), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 32, 4, stride=2, bias=False), nn.BatchNorm2d(32)
        self.conv3, self.bn3 = nn.Conv2d(32, 64, 4, stride=2, bias=False), nn.BatchNorm2d(64)
        self.conv4 = nn.Conv2d(64, z_dim * 2, 5, stride=1, bias=True)

    def reparameterize(self, z):
        z = z.view(z.size(0), -1)
        mu, log_sigma = z[:, :self.z_dim], z[:, self.z_dim:]
        return mu + torch.randn_like(mu) * torch.exp(log_sigma)

    def forward(self, x):
        x = F.leaky_relu(self.bn1(self.conv1(x)), negative_slope=0.1)
        x = F.leaky_relu(self.bn2(self.conv2(x)), negative_slope=0.1)
        x = F.leaky_relu(self.bn3(self.conv3(x)), negative_slope=0.1)
        z = self.reparameterize(self.conv4(x))
        return z.view(x.size(0), self.z_dim, 1, 1)


def weights_init_normal(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
        torch.nn.init.constant_(m.bias.data, 0.0)
