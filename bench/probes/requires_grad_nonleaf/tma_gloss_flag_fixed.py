# expect: clean
# source: https://github.com/yl4579/StyleTTS2/issues/258
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

config = {"epochs": 4, "TMA_epoch": 2, "steps_per_epoch": 3, "lr": 1e-3,
          "loss_params": {"lambda_mel": 5.0, "lambda_s2s": 1.0, "lambda_mono": 1.0}}
VOCAB, N_MELS, T_TEXT, T_MEL, HID = 20, 16, 6, 12, 32


class TextAligner(nn.Module):
    def __init__(self):
        super().__init__()
        self.mel_proj = nn.Linear(N_MELS, HID)
        self.tok_emb = nn.Embedding(VOCAB, HID)
        self.ctc = nn.Linear(HID, VOCAB)

    def forward(self, mels, texts):
        m = self.mel_proj(mels)                              # B, T_MEL, HID
        t = self.tok_emb(texts)                              # B, T_TEXT, HID
        attn = torch.softmax(t @ m.transpose(1, 2), dim=-1)  # B, T_TEXT, T_MEL
        s2s_pred = self.ctc(attn @ m)                        # B, T_TEXT, VOCAB
        return s2s_pred, attn


text_aligner = TextAligner()
decoder = nn.Sequential(nn.Linear(T_TEXT, 64), nn.ReLU(), nn.Linear(64, N_MELS))
decoder.requires_grad_(False)  # pretrained decoder stays fixed in this stage
optimizer = torch.optim.Adam(text_aligner.parameters(), lr=config["lr"])
lp = config["loss_params"]

for epoch in range(config["epochs"]):
    for step in range(config["steps_per_epoch"]):
        texts = torch.randint(0, VOCAB, (8, T_TEXT))
        mels = torch.randn(8, T_MEL, N_MELS)

        if epoch >= config["TMA_epoch"]:
            s2s_pred, s2s_attn = text_aligner(mels, texts)
        else:
            with torch.no_grad():
                s2s_pred, s2s_attn = text_aligner(mels, texts)

        mel_rec = decoder(s2s_attn.transpose(1, 2))
        loss_mel = F.l1_loss(mel_rec, mels)
        g_loss = lp["lambda_mel"] * loss_mel

        if epoch >= config["TMA_epoch"]:
            loss_s2s = F.cross_entropy(s2s_pred.reshape(-1, VOCAB), texts.reshape(-1))
            loss_mono = F.l1_loss(s2s_attn, s2s_attn.detach().round()) * 10
            g_loss = g_loss + lp["lambda_s2s"] * loss_s2s + lp["lambda_mono"] * loss_mono

        optimizer.zero_grad()
        g_loss.requires_grad_()
        g_loss.backward()
        optimizer.step()

    print(f"Epoch [{epoch + 1}/{config['epochs']}], Loss: {g_loss.item():.5f}")
