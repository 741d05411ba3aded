# expect: clean
# source: https://github.com/deepjavalibrary/djl/issues/2144
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

VOCAB, MAX_LEN, HIDDEN, NUM_CLASSES = 1000, 24, 64, 5


class TinyDistilBert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.position_embeddings = nn.Embedding(MAX_LEN, HIDDEN)
        layer = nn.TransformerEncoderLayer(HIDDEN, nhead=4, dim_feedforward=128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask, position_ids):
        h = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        return self.encoder(h, src_key_padding_mask=attention_mask == 0)


class Predictor:
    def __init__(self, model):
        self.model = model.eval()

    @torch.inference_mode()
    def predict(self, input_ids):
        attention_mask = torch.ones_like(input_ids)
        position_ids = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        return self.model(input_ids, attention_mask, position_ids)


embedder = Predictor(TinyDistilBert())

classifier = nn.Sequential(
    nn.Linear(HIDDEN, 128),
    nn.ReLU(),
    nn.Dropout(0.2),
    nn.Linear(128, NUM_CLASSES),
)
optimizer = torch.optim.Adam(classifier.parameters(), lr=1e-3)

reviews = torch.randint(0, VOCAB, (64, MAX_LEN))
ratings = torch.randint(0, NUM_CLASSES, (64,))

for epoch in range(2):
    for i in range(0, len(reviews), 16):
        batch_ids, batch_y = reviews[i : i + 16], ratings[i : i + 16]
        hidden = embedder.predict(batch_ids).clone()
        logits = classifier(hidden[:, 0])
        loss = F.cross_entropy(logits, batch_y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
